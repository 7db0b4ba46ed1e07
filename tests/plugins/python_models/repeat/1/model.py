# A decoupled model in the manner of Triton's "repeat" example: one response per element of
# IN (OUT the element, IDX its position), sent from a thread of the model's own after
# execute has returned; a negative element is answered with an error and the stream goes on;
# the request ends with the final flag alone. IN starting with -999 makes execute raise.

import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if values.size and values.reshape(-1)[0] == -999:
                raise RuntimeError("asked to fail")
            sender = request.get_response_sender()
            threading.Thread(target=self.respond, args=(values, sender), daemon=True).start()
        return None

    def respond(self, values, sender):
        for index, value in enumerate(values.reshape(-1)):
            if value < 0:
                response = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"element {index} is negative: {value}"))
            else:
                response = pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("OUT", np.array([value], np.int32)),
                    pb_utils.Tensor("IDX", np.array([index], np.uint32)),
                ])
            sender.send(response)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
