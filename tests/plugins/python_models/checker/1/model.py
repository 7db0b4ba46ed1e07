# Fails a request whose input holds a negative number with a TritonError (INVALID_ARG) in its
# response; the other requests of the batch succeed.

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (values < 0).any():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "negative input", pb_utils.TritonError.INVALID_ARG)))
            else:
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", values * 2)]))
        return responses
