# A model holding a large weight (WEIGHT_MB megabytes of float64, every page written) made in
# initialize. With INFERD_FORK_AFTER_INITIALIZE its instances past the first are forked from
# the first after initialize, and after_fork(args) gives each its own name. Every instance
# writes its name to "pids/<its pid>" in the model folder once it serves; execute answers
# the instance's name, its pid and IN times one weight element (read, never written).

import json
import os
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        megabytes = float(config["parameters"]["WEIGHT_MB"]["string_value"])
        self.weight = np.full(int(megabytes * 1e6 / 8), 1.5)
        self._take_identity(args)

    def after_fork(self, args):
        self._take_identity(args)

    def _take_identity(self, args):
        self.name = args["model_instance_name"]
        pids = Path(args["model_repository"]) / "pids"
        pids.mkdir(exist_ok=True)
        (pids / str(os.getpid())).write_text(self.name)

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("INSTANCE", np.array([self.name], dtype=object)),
                pb_utils.Tensor("PID", np.array([os.getpid()], np.int32)),
                pb_utils.Tensor("WEIGHT", np.array([value * self.weight[-1]])),
            ]))
        return responses
