# Raises out of execute when any request holds a negative number, failing the whole call.

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            if (pb_utils.get_input_tensor_by_name(request, "IN").as_numpy() < 0).any():
                raise ValueError("cannot handle negative numbers")
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
                    "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
                for r in requests]
