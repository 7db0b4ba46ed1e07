# Three instances in two groups. ``initialize`` appends "<name> <kind> <device id>" (its
# model_instance_* arguments) to "initialized.txt" in the model folder; each request appends
# the instance's name to "started.txt", waits until the test writes "go" there, and answers
# the name: three requests held at once run one on each instance.

import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

WAIT_SECS = 60.0


class TritonPythonModel:
    def initialize(self, args):
        self.folder = Path(args["model_repository"])
        self.name = args["model_instance_name"]
        record = (f"{self.name} {args['model_instance_kind']} "
                  f"{args['model_instance_device_id']}\n")
        with (self.folder / "initialized.txt").open("a") as initialized:
            initialized.write(record)

    def execute(self, requests):
        with (self.folder / "started.txt").open("a") as started:
            started.write(self.name + "\n")
        deadline = time.monotonic() + WAIT_SECS
        while not (self.folder / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        name = pb_utils.Tensor("INSTANCE", np.array([self.name], dtype=object))
        return [pb_utils.InferenceResponse(output_tensors=[name]) for _ in requests]
