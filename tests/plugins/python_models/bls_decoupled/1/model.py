# A BLS call with decoupled=True: IN goes to the decoupled "repeat" model, and the responses
# it streams back are summed (SUM of OUT), counted (COUNT) and their errors counted (ERRORS).

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN")
            bls = pb_utils.InferenceRequest(model_name="repeat", inputs=[values],
                                            requested_output_names=["OUT"])
            total = count = errors = 0
            for response in bls.exec(decoupled=True):
                if response.has_error():
                    errors += 1
                    continue
                count += 1
                total += int(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()[0])
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SUM", np.array([total], np.int32)),
                pb_utils.Tensor("COUNT", np.array([count], np.int32)),
                pb_utils.Tensor("ERRORS", np.array([errors], np.int32)),
            ]))
        return responses
