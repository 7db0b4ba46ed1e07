# Answers its process id (PID). Its first initialize writes "started" in its model folder; a
# later one (the reload after its process died) waits until the test writes "release" there,
# so the test sees the model not ready for as long as it likes.

import os
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

WAIT_SECS = 60.0


class TritonPythonModel:
    def initialize(self, args):
        folder = Path(args["model_repository"])
        started = folder / "started"
        if started.exists():
            deadline = time.monotonic() + WAIT_SECS
            while not (folder / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        started.write_text(str(os.getpid()))

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("PID", np.array([os.getpid()], np.int32))]) for _ in requests]
