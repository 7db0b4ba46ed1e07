# Two calls to ``simple`` in flight at once: (a, b) for OUTPUT0 = a + b and (b, a) for
# OUTPUT1 = b - a.

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            pending = []
            for first, second in ((a, b), (b, a)):
                swapped = [pb_utils.Tensor("INPUT0", first.as_numpy()),
                           pb_utils.Tensor("INPUT1", second.as_numpy())]
                bls_request = pb_utils.InferenceRequest(
                    model_name="simple", inputs=swapped,
                    requested_output_names=["OUTPUT0", "OUTPUT1"])
                pending.append(bls_request.async_exec())
            forward, backward = await asyncio.gather(*pending)
            for bls_response in (forward, backward):
                if bls_response.has_error():
                    raise pb_utils.TritonModelException(bls_response.error().message())
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.get_output_tensor_by_name(forward, "OUTPUT0"),
                pb_utils.Tensor("OUTPUT1", pb_utils.get_output_tensor_by_name(
                    backward, "OUTPUT1").as_numpy()),
            ]))
        return responses
