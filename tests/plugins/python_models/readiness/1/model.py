# A model with is_ready() (python_backend#430), steered by files in its model folder: with
# "not_ready" there it answers False, with "broken" it raises, with "not_bool" it answers a
# string; each call appends a line to "checks.txt". It echoes IN.

from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.folder = Path(args["model_repository"])

    def is_ready(self):
        with (self.folder / "checks.txt").open("a") as checks:
            checks.write("checked\n")
        if (self.folder / "broken").exists():
            raise RuntimeError("the feature store is unreachable")
        if (self.folder / "not_bool").exists():
            return "yes"
        return not (self.folder / "not_ready").exists()

    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(
                request, "IN").as_numpy())]) for request in requests]
