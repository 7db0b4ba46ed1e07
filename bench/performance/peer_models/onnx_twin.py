"""A Triton python-backend model that runs an inferd example model's ONNX graph.

``bench/performance/peers.py`` copies this file, as ``model.py``, next to a copy of the example's
``model.onnx`` in each version folder of the twin repository it generates under
``bench/.peers/``, so that real Triton (whose ``nvidia-pytriton`` build has no onnxruntime
backend) serves the same graph as inferd. The session is opened the way inferd's onnxruntime
backend opens its own: one intra-op thread, one inter-op thread, sequential execution. When
the config batches (``max_batch_size`` > 0), the requests of one ``execute`` call (a dynamic
batch) are merged along the first axis into one ``session.run`` and the outputs split back;
otherwise each request is run on its own. It runs inside Triton's python stub, never in
inferd's venv.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import onnxruntime
import triton_python_backend_utils as pb_utils  # provided by Triton's python stub


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.batched = int(config.get("max_batch_size", 0)) > 0
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = onnxruntime.InferenceSession(path, sess_options=options,
                                                    providers=["CPUExecutionProvider"])
        self.input_names = [tensor.name for tensor in self.session.get_inputs()]
        self.output_names = [tensor.name for tensor in self.session.get_outputs()]

    def execute(self, requests: list[Any]) -> list[Any]:
        feeds = [{name: pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                  for name in self.input_names} for request in requests]
        if not self.batched or len(requests) == 1:
            return [self.respond(self.session.run(self.output_names, feed)) for feed in feeds]
        sizes = [len(feed[self.input_names[0]]) for feed in feeds]
        merged = {name: np.concatenate([feed[name] for feed in feeds]) for name in self.input_names}
        outputs = self.session.run(self.output_names, merged)
        bounds = np.cumsum(sizes)[:-1]
        parts = [np.split(output, bounds) for output in outputs]
        return [self.respond([part[index] for part in parts]) for index in range(len(requests))]

    def respond(self, outputs: list[np.ndarray]) -> Any:
        tensors = [pb_utils.Tensor(name, np.ascontiguousarray(array))
                   for name, array in zip(self.output_names, outputs, strict=True)]
        return pb_utils.InferenceResponse(output_tensors=tensors)
