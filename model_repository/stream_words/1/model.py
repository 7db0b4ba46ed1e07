# Streams its input back one word at a time through the request's response sender: try
# curl -N -X POST localhost:8000/v2/models/stream_words/generate_stream \
#      -d '{"text_input": "tokens arrive one by one"}'

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            for word in text.reshape(-1)[0].decode("utf-8").split():
                output = pb_utils.Tensor("text_output", np.array([word.encode()], np.object_))
                sender.send(pb_utils.InferenceResponse(output_tensors=[output]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
