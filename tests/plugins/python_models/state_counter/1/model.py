# Adds INPUT to the count the server keeps for the sequence (implicit state COUNT_IN ->
# COUNT_OUT) and answers the new count.

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            count = pb_utils.get_input_tensor_by_name(request, "COUNT_IN").as_numpy()
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            total = count + value
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("COUNT_OUT", total)]))
        return responses
