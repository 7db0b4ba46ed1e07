# Sends its inputs to ``simple`` (model name from the request parameter "target", as Triton's
# BLS example takes it) and returns simple's outputs as its own; simple's error is passed on.

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = json.loads(request.parameters()).get("target", "simple")
            bls_request = pb_utils.InferenceRequest(
                model_name=target,
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                        pb_utils.get_input_tensor_by_name(request, "INPUT1")],
                requested_output_names=["OUTPUT0", "OUTPUT1"],
            )
            bls_response = bls_request.exec()
            if bls_response.has_error():
                responses.append(pb_utils.InferenceResponse(error=bls_response.error()))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.get_output_tensor_by_name(bls_response, "OUTPUT0"),
                pb_utils.get_output_tensor_by_name(bls_response, "OUTPUT1"),
            ]))
        return responses
