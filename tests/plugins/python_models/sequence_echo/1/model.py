# A sequence model that shows what the sequence batcher hands it: per request, the running
# sum of INPUT over its sequence (kept in the model, by correlation id: the batcher binds a
# sequence to one instance), the control values it received (START, END, READY, CORRID), and
# how many requests the execute call got (null requests of the direct strategy included),
# and request.flags() beside pb_utils' START and END flag constants.

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            def value(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]

            start, end, ready = value("START"), value("END"), value("READY")
            corrid = value("CORRID")
            corrid = corrid.decode() if isinstance(corrid, bytes) else int(corrid)
            x = float(value("INPUT"))
            if ready:
                total = x if start else self.sums.get(corrid, 0.0) + x
                self.sums[corrid] = total
                if end:
                    self.sums.pop(corrid, None)
            else:
                total = -1.0
            outputs = {
                "OUTPUT": np.array([[total]], np.float32),
                "START_SEEN": np.array([[start]], np.int32),
                "END_SEEN": np.array([[end]], np.float32),
                "READY_SEEN": np.array([[ready]], np.bool_),
                "CORRID_SEEN": np.array([[str(corrid).encode()]], np.object_),
                "BATCH": np.array([[len(requests)]], np.int32),
                "FLAGS_SEEN": np.array([[request.flags(),
                                         pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
                                         pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END]],
                                       np.int32),
            }
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(k, v) for k, v in outputs.items()]))
        return responses
