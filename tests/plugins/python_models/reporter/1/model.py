# Returns IN doubled, with response parameters (Triton 2.55's python_backend#394) that say so:
# a bool, an int and a string, the three types a response parameter may have.

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            out = pb_utils.Tensor("OUT", np.array([2 * value], np.int32))
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[out],
                parameters={"doubled": True, "input": value, "by": "reporter"}))
        return responses
