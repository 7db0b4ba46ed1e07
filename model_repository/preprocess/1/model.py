"""OCR pre-processing, written for Triton's python backend and served unchanged by inferd.

Each input string is an encoded image; here its bytes are read as 8-bit pixels, padded or cut
to 32x32 and scaled to [0, 1], which is what the detector (``craft``) takes. The byte length of
each input goes out too, for the post-processing step.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

SIDE = 32


class TritonPythonModel:
    def initialize(self, args):
        self.logger = pb_utils.Logger

    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            images = np.zeros((len(texts), 1, SIDE, SIDE), dtype=np.float32)
            sizes = np.zeros((len(texts), 1), dtype=np.int32)
            for row, (text,) in enumerate(texts):
                pixels = np.frombuffer(bytes(text)[: SIDE * SIDE], dtype=np.uint8)
                images[row, 0].flat[: len(pixels)] = pixels / 255.0
                sizes[row, 0] = len(text)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("images", images),
                pb_utils.Tensor("sizes", sizes),
            ]))
        return responses
