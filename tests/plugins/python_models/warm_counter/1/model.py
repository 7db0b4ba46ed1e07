# Echoes INPUT0 and appends a line per execute call (the instance's process id, request
# count, the requests' shapes) to executions.log in its model folder, so a test can see
# warm-up run on every instance (each python instance has a process of its own).

import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = str(os.getpid())
        self.log = os.path.join(args["model_repository"], "executions.log")

    def execute(self, requests):
        shapes = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().shape
                  for r in requests]
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"{self.name} {len(requests)} {shapes}\n")
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
