# Two instances, the second forked from the first after initialize. Each request appends
# "<instance name>" to "started.txt" in the model folder, waits until the test writes "go"
# there, then calls "reporter" through BLS and answers its OUT with the instance's name: with
# two requests started at once, the fork's BLS call goes through its executor.

import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

WAIT_SECS = 60.0


class TritonPythonModel:
    def initialize(self, args):
        self.folder = Path(args["model_repository"])
        self.name = args["model_instance_name"]

    def after_fork(self, args):
        self.name = args["model_instance_name"]

    def execute(self, requests):
        with (self.folder / "started.txt").open("a") as started:
            started.write(self.name + "\n")
        deadline = time.monotonic() + WAIT_SECS
        while not (self.folder / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        responses = []
        for request in requests:
            answer = pb_utils.InferenceRequest(
                model_name="reporter",
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                requested_output_names=["OUT"]).exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.get_output_tensor_by_name(answer, "OUT"),
                pb_utils.Tensor("INSTANCE", np.array([self.name], dtype=object))]))
        return responses
