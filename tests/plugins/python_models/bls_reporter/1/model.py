# Calls "reporter" through BLS and returns its OUT, and the parameters of reporter's response
# as it read them (response.parameters(), a JSON string: python_backend#395) in PARAMETERS.
# Its own response carries one parameter of its own.

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="reporter",
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                requested_output_names=["OUT"])
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            parameters = pb_utils.Tensor(
                "PARAMETERS", np.array([answer.parameters()], dtype=object))
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.get_output_tensor_by_name(answer, "OUT"), parameters],
                parameters={"via": "bls_reporter"}))
        return responses
