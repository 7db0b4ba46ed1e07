"""OCR post-processing, written for Triton's python backend and served unchanged by inferd.

Takes the detector's score map, the refiner's map, the original input strings and the sizes
the pre-processing measured, and answers two strings per input: how many cells the refiner
marked as text, and a summary of the input and the detector's mean score.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

THRESHOLD = 0.5


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        responses = []
        for request in requests:
            score = pb_utils.get_input_tensor_by_name(request, "score").as_numpy()
            refined = pb_utils.get_input_tensor_by_name(request, "refined").as_numpy()
            texts = pb_utils.get_input_tensor_by_name(request, "texts").as_numpy()
            sizes = pb_utils.get_input_tensor_by_name(request, "sizes").as_numpy()
            if not (len(score) == len(refined) == len(texts) == len(sizes)):
                error = pb_utils.TritonError("postprocess_0: inputs disagree on the batch size")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            rows = []
            for index in range(len(texts)):
                regions = int((refined[index] > THRESHOLD).sum())
                rows.append([
                    f"regions={regions}".encode(),
                    f"bytes={int(sizes[index, 0])} score={float(score[index].mean()):.3f}".encode(),
                ])
            output = np.array(rows, dtype=np.object_).reshape(len(texts), 2)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT", output)]))
        return responses
