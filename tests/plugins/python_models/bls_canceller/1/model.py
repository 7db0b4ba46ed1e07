# Streams the decoupled "ticker" through BLS (exec(decoupled=True)), takes TAKE of its responses,
# then cancels the call with the iterator's cancel() (python_backend#398) and reads on to the
# end: ticker sees its request cancelled and ends it. TAKEN is how many responses it read in
# all; FINISHED that the iterator ended (ticker's final flag came).

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            take = int(pb_utils.get_input_tensor_by_name(request, "TAKE").as_numpy()[0])
            call = pb_utils.InferenceRequest(
                model_name="ticker",
                inputs=[pb_utils.get_input_tensor_by_name(request, "TAG")],
                requested_output_names=["OUT"])
            iterator = call.exec(decoupled=True)
            taken = 0
            for answer in iterator:
                if answer.has_error():
                    break
                taken += 1
                if taken == take:
                    iterator.cancel()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("TAKEN", np.array([taken], np.int32)),
                pb_utils.Tensor("FINISHED", np.array([True], bool)),
            ]))
        return responses
