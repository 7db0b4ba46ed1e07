# Lengths come out as int64 (numpy's default) and are cast to the configured INT32; the
# uppercased strings come out as str objects and are sent as UTF-8. ``text_helpers`` sits next
# to model.py: Triton puts the version folder on sys.path.

import numpy as np
import triton_python_backend_utils as pb_utils
from text_helpers import shout


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            lengths = np.array([len(item) for item in texts], dtype=np.int64)
            upper = np.array([shout(item.decode("utf-8")) for item in texts], dtype=object)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("LENGTH", lengths), pb_utils.Tensor("UPPER", upper),
            ]))
        return responses
