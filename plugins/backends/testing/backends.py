"""Test backends for plugin authors and for inferd's own end-to-end tests.

``TestingBackend`` is one backend whose behaviour the model's config selects with string
``parameters``, as a Triton config would write them::

    backend: "inferd_testing"
    parameters { key: "mode" value { string_value: "slow" } }
    parameters { key: "delay_ms" value { string_value: "250" } }

Modes: ``echo`` (the default: output i returns input i), ``fail`` (every request fails),
``slow`` (sleeps ``delay_ms`` per batch, then echoes), ``fail_load`` (loading raises
``message``), ``slow_load`` (loading sleeps ``load_delay_ms``, then echoes), ``crash``
(the executor process exits with status 17 on the first batch) and ``segfault`` (the
process running the first batch dies of SIGSEGV, as a framework's bug would kill it: under
``inferd_testing_native`` by default the server's own). The config must declare its
inputs and outputs; nothing is auto-completed. Parameter ``times_output`` names one more
output, ``TYPE_INT64`` with dims ``[2]``, that echoes nothing: it holds ``time.time_ns()`` when
the batch started and when it ended, so a test can tell whether two models ran at the same
time. Two parameters let a test see and steer a batch instead of guessing with sleeps:
``started_file`` names a file to which every batch appends one line (its request ids) as it
starts, so a test can wait until a request is running; ``release_file`` makes a ``slow`` batch
(or a ``slow_load`` load) wait until that file exists, ``delay_ms`` (``load_delay_ms``) then
only its bound. Owns no framework and no I/O
beyond sleeping and those two files.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk import Backend, Instance, Model, ModelContext
from inferd.protocols.errors import InferdError, InvalidArgument
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import config_type_to_datatype

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

MODES = ("echo", "fail", "slow", "fail_load", "slow_load", "crash", "segfault")
FAILURE_MESSAGE = "testing backend: failure requested"
LOAD_FAILURE_MESSAGE = "testing backend: load failure requested"
CRASH_EXIT_STATUS = 17


def _parameters(config: ModelConfig) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


def _milliseconds(model: str, parameters: dict[str, str], key: str) -> float:
    text = parameters.get(key, "0")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise InvalidArgument(
            f"model '{model}': parameter {key} must be a non-negative number, got {text!r}"
        )
    return value


class TestingBackend(Backend):
    __test__ = False  # its name starts with Test, so pytest would try to collect it
    name = "inferd_testing"

    def load_model(self, context: ModelContext) -> Model:
        parameters = _parameters(context.config)
        mode = parameters.get("mode", "echo")
        if mode not in MODES:
            raise InvalidArgument(
                f"model '{context.name}': testing backend mode {mode!r} is not one of {MODES}"
            )
        if mode == "fail_load":
            raise InvalidArgument(parameters.get("message", LOAD_FAILURE_MESSAGE))
        if mode == "slow_load":
            load_seconds = _milliseconds(context.name, parameters, "load_delay_ms") / 1000
            if parameters.get("release_file"):
                hold(parameters["release_file"], load_seconds)
            else:
                time.sleep(load_seconds)
        delay_ms = _milliseconds(context.name, parameters, "delay_ms") if mode == "slow" else 0.0
        return TestingModel(context, mode, delay_ms)


def started(path: str, requests: Sequence[InferRequest]) -> None:
    """One line, the batch's request ids, appended to ``path`` (flushed before it returns)."""
    with open(path, "a", encoding="utf-8") as file:
        file.write(" ".join(request.id or "-" for request in requests) + "\n")


def hold(release_file: str, bound_seconds: float) -> None:
    """Until ``release_file`` exists, or ``bound_seconds`` have passed."""
    deadline = time.monotonic() + bound_seconds
    while not os.path.exists(release_file) and time.monotonic() < deadline:
        time.sleep(0.005)


class TestingModel(Model):
    __test__ = False  # its name starts with Test, so pytest would try to collect it

    def __init__(self, context: ModelContext, mode: str, delay_ms: float) -> None:
        self.config = model_config_pb2.ModelConfig()
        self.config.CopyFrom(context.config)
        self.mode = mode
        self.delay_seconds = delay_ms / 1000
        self._name = context.name
        self._version = str(context.version)
        self.times_output = _parameters(self.config).get("times_output", "")
        self.started_file = _parameters(self.config).get("started_file", "")
        self.release_file = _parameters(self.config).get("release_file", "")
        inputs = list(self.config.input)
        outputs = [o for o in self.config.output if o.name != self.times_output]
        if self.times_output and len(outputs) == len(self.config.output):
            raise InvalidArgument(
                f"model '{context.name}': parameter times_output names output "
                f"'{self.times_output}', which the config does not declare"
            )
        if mode not in ("fail", "crash", "segfault") and len(inputs) != len(outputs):
            raise InvalidArgument(
                f"model '{context.name}': the testing backend echoes input i as output i, so "
                f"it needs as many outputs as inputs (got {len(inputs)} and {len(outputs)})"
            )
        # fail and crash modes may declare fewer outputs: only the pairs that exist echo.
        for input_, output in zip(inputs, outputs, strict=False):
            if input_.data_type != output.data_type:
                raise InvalidArgument(
                    f"model '{context.name}': output '{output.name}' echoes input "
                    f"'{input_.name}', so both need the same data_type"
                )
        # output name -> (the input it echoes, its datatype)
        self._echoes = {
            output.name: (
                input_.name,
                config_type_to_datatype(model_config_pb2.DataType.Name(output.data_type)),
            )
            for input_, output in zip(inputs, outputs, strict=False)
        }

    def create_instance(self, index: int) -> Instance:
        return TestingInstance(self)

    def respond(
        self, request: InferRequest, times_ns: tuple[int, int] = (0, 0)
    ) -> InferResponse | InferdError:
        """The one request's response (or error) in this model's mode; ``times_ns`` is when
        its batch started and ended (for the ``times_output``)."""
        if self.mode == "fail":
            return InvalidArgument(FAILURE_MESSAGE)
        given = {tensor.name: tensor for tensor in request.inputs}
        outputs = []
        timed = (self.times_output,) if self.times_output else ()
        names = request.outputs or (*self._echoes, *timed)
        for name in names:
            if self.times_output and name == self.times_output:
                outputs.append(self._times(request, times_ns))
                continue
            if name not in self._echoes:
                return InvalidArgument(
                    f"unexpected inference output '{name}' for model '{self._name}'"
                )
            input_name, datatype = self._echoes[name]
            source = given.get(input_name)
            if source is not None:
                outputs.append(Tensor(name, datatype, source.shape, source.data))
        return InferResponse(
            model=self._name, version=self._version, id=request.id, outputs=tuple(outputs)
        )

    def _times(self, request: InferRequest, times_ns: tuple[int, int]) -> Tensor:
        times = np.array(times_ns, dtype=np.int64)
        if self.config.max_batch_size > 0 and request.inputs:
            times = np.tile(times, (request.inputs[0].shape[0], 1))
        return Tensor(self.times_output, "INT64", times.shape, times)


class TestingInstance(Instance):
    __test__ = False  # its name starts with Test, so pytest would try to collect it

    def __init__(self, model: TestingModel) -> None:
        self._model = model

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        if self._model.mode == "crash":
            os._exit(CRASH_EXIT_STATUS)
        if self._model.mode == "segfault":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        started_ns = time.time_ns()
        if self._model.started_file:
            started(self._model.started_file, requests)
        if self._model.release_file:
            hold(self._model.release_file, self._model.delay_seconds)
        elif self._model.delay_seconds:
            time.sleep(self._model.delay_seconds)
        times_ns = (started_ns, time.time_ns())
        return [self._model.respond(request, times_ns) for request in requests]
