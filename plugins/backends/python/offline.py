"""A python model's ``auto_complete_config`` run without a server, in a child process.

Owns ``complete_offline`` (the python backend's ``BackendSpec.completion``, which ``inferd
check`` uses): it runs the model's ``model.py`` import and ``auto_complete_config`` through
the backend's own ``load_module`` and ``auto_complete`` (``model_code``) in a fresh interpreter
with a time limit, so user code can neither hang nor pollute the checking process, and hands
back the completed config. The child's standard output carries only the serialized config (what the
model prints goes to standard error).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.sdk import ModelContext
from inferd.protocols.errors import InvalidArgument

DEFAULT_TIMEOUT_SECS = 30.0
TIMEOUT_OPTION = "completion_timeout_secs"


def complete_offline(context: ModelContext) -> ModelConfig:
    """The config a load would run the model with, or ``InvalidArgument`` with the reason."""
    path = context.model_file("model.py")
    if not path.is_file():
        raise InvalidArgument(f"model '{context.name}': Python model file not found in '{path}'")
    timeout = float(context.options.get(TIMEOUT_OPTION, DEFAULT_TIMEOUT_SECS))
    command = [sys.executable, "-P", "-m", __name__, context.name, str(path),
               "1" if context.auto_complete else "0"]
    try:
        finished = subprocess.run(
            command, input=context.config.SerializeToString(), capture_output=True,
            timeout=timeout, check=False, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
    except subprocess.TimeoutExpired:
        raise InvalidArgument(
            f"model '{context.name}': auto_complete_config did not finish within {timeout:g} s"
        ) from None
    if finished.returncode != 0:
        lines = finished.stderr.decode("utf-8", "replace").strip().splitlines()
        cause = lines[-1] if lines else f"exit status {finished.returncode}"
        raise InvalidArgument(cause)
    return ModelConfig.FromString(finished.stdout)


def _main(argv: list[str]) -> int:
    from inferd.plugins.backends.python.model_code import (
        MODEL_CLASS_NAME,
        auto_complete,
        load_module,
    )

    name, path, enabled = argv
    result = sys.stdout.buffer
    sys.stdout = sys.stderr  # the model's prints must not mix with the config
    config = ModelConfig.FromString(sys.stdin.buffer.read())
    try:
        module = load_module(name, Path(path))
        if enabled == "1":
            config = auto_complete(getattr(module, MODEL_CLASS_NAME), config, name)
    except InvalidArgument as error:
        print(error.message, file=sys.stderr)
        return 1
    if not config.name:
        config.name = name
    result.write(config.SerializeToString())
    result.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
