# Holds a request whose TAG is odd until its client goes away (request.is_cancelled()) or a
# file named "release" appears in the model's folder; any other TAG is answered at once. Each
# request's tag goes to "record.txt" in the model's folder when it starts and when it ends
# ("finished", or "cancelled" when is_cancelled() said so), so a test sees what ran.

import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

HOLD_SECS = 30.0  # the longest a held request waits


class TritonPythonModel:
    def initialize(self, args):
        self.folder = Path(args["model_repository"])

    def record(self, line):
        with (self.folder / "record.txt").open("a") as record:
            record.write(line + "\n")

    def execute(self, requests):
        responses = []
        for request in requests:
            tag = int(pb_utils.get_input_tensor_by_name(request, "TAG").as_numpy().reshape(-1)[0])
            self.record(f"{tag} started")
            deadline = time.monotonic() + HOLD_SECS
            while (tag % 2 and not request.is_cancelled() and time.monotonic() < deadline
                   and not (self.folder / "release").exists()):
                time.sleep(0.01)
            self.record(f"{tag} {'cancelled' if request.is_cancelled() else 'finished'}")
            out = pb_utils.Tensor("OUT", np.array([[tag]], np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
