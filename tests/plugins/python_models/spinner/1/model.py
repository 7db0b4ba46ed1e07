# Spins in pure Python (holding the interpreter lock) for SECONDS and answers what it saw:
# its process id and when its execute began and ended (time.time()), so a test can tell
# whether two instances ran in two processes at the same time.

import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = float(pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()[0])
            began = time.time()
            spins = 0
            while time.time() - began < seconds:
                spins += 1  # pure Python: never lets go of the lock
            record = np.array([os.getpid(), began, time.time()], np.float64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RECORD", record)]))
        return responses
