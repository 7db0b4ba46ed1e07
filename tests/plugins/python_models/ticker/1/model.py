# A decoupled model that sends its request's TAG every 20 ms until the client goes away
# (response_sender.is_cancelled()), then the final flag alone; it gives up after 30 s. It
# writes "<tag> cancelled" (or "<tag> gave up") to "record.txt" in the model's folder.

import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

GIVE_UP_SECS = 30.0


class TritonPythonModel:
    def initialize(self, args):
        self.folder = Path(args["model_repository"])

    def execute(self, requests):
        for request in requests:
            tag = int(pb_utils.get_input_tensor_by_name(request, "TAG").as_numpy()[0])
            sender = request.get_response_sender()
            deadline = time.monotonic() + GIVE_UP_SECS
            while not sender.is_cancelled() and time.monotonic() < deadline:
                out = pb_utils.Tensor("OUT", np.array([tag], np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
                time.sleep(0.02)
            ending = "cancelled" if sender.is_cancelled() and request.is_cancelled() else "gave up"
            with (self.folder / "record.txt").open("a") as record:
                record.write(f"{tag} {ending}\n")
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
