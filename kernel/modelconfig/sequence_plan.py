"""What a sequence model's config (``sequence_batching``) says, read once at load.

Owns Triton's rules for the section: the strategy (``direct``, the default, or ``oldest``)
and its knobs, the idle time after which a sequence is released, the control inputs
(``CONTROL_SEQUENCE_START`` / ``_END`` / ``_READY`` with their ``int32_false_true`` /
``fp32_false_true`` / ``bool_false_true`` values, ``CONTROL_SEQUENCE_CORRID`` with its
``data_type``) and the implicit state (``state`` entries: an input the server feeds, an
output it keeps, and the ``initial_state`` a sequence starts from, zeros or a file under the
model's ``initial_state/`` folder). It also says which tensors the server adds to what the
backend sees (``execution_config``): the backend loads the model with the control and state
tensors as ordinary inputs and outputs, and clients never see them. Pure but for reading an
initial-state file; every problem is an ``InvalidArgument`` naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.repository.folders import read_model_data
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.tensors import config_type_to_datatype, deserialize_bytes, numpy_dtype

Control = model_config_pb2.ModelSequenceBatching.Control
INITIAL_STATE_FOLDER = "initial_state"
CORRID_TYPES = (model_config_pb2.TYPE_UINT64, model_config_pb2.TYPE_INT64,
                model_config_pb2.TYPE_UINT32, model_config_pb2.TYPE_INT32,
                model_config_pb2.TYPE_STRING)
_FLAG_KINDS = {Control.CONTROL_SEQUENCE_START: "start", Control.CONTROL_SEQUENCE_END: "end",
               Control.CONTROL_SEQUENCE_READY: "ready"}


@dataclass(frozen=True, slots=True)
class ControlTensor:
    """One control input: ``kind`` is ``start``, ``end``, ``ready`` or ``corrid``; a flag's
    ``values`` are its (false, true) values."""

    name: str
    kind: str
    datatype: str
    values: tuple[Any, Any] = (0, 1)


@dataclass(frozen=True, slots=True)
class StateTensor:
    """One implicit state: fed as input ``input_name``, read back from output
    ``output_name``; ``initial`` is its value at a sequence start (no batch dimension)."""

    input_name: str
    output_name: str
    datatype: str
    data_type: int
    dims: tuple[int, ...]
    initial: np.ndarray


@dataclass(frozen=True, slots=True)
class SequencePlan:
    oldest: bool
    batching: bool
    max_batch_size: int
    slots_per_instance: int
    idle_ns: int
    max_queue_delay_ns: int
    minimum_slot_utilization: float
    preferred_batch_sizes: tuple[int, ...]
    controls: tuple[ControlTensor, ...]
    states: tuple[StateTensor, ...]

    @classmethod
    def of(cls, config: ModelConfig, model_dir: Path | None) -> SequencePlan:
        """The plan of a normalized config; ``model_dir`` holds ``initial_state/`` files."""
        section = config.sequence_batching
        model = config.name
        _refuse_unsupported(section, model)
        oldest = section.HasField("oldest")
        batching = config.max_batch_size > 0
        max_batch = max(1, int(config.max_batch_size))
        if oldest:
            strategy = section.oldest
            slots = max(1, int(strategy.max_candidate_sequences))
            delay_ns = int(strategy.max_queue_delay_microseconds) * 1000
            utilization = 0.0
            preferred = tuple(int(size) for size in strategy.preferred_batch_size)
        else:
            slots = max_batch
            delay_ns = int(section.direct.max_queue_delay_microseconds) * 1000
            utilization = float(section.direct.minimum_slot_utilization)
            preferred = ()
        return cls(
            oldest=oldest, batching=batching, max_batch_size=max_batch,
            slots_per_instance=slots,
            idle_ns=int(section.max_sequence_idle_microseconds) * 1000,
            max_queue_delay_ns=delay_ns, minimum_slot_utilization=utilization,
            preferred_batch_sizes=preferred,
            controls=_controls(section, model),
            states=tuple(_state(entry, model, model_dir) for entry in section.state),
        )

    def added_inputs(self) -> tuple[str, ...]:
        return (*(c.name for c in self.controls), *(s.input_name for s in self.states))

    def added_outputs(self) -> tuple[str, ...]:
        return tuple(state.output_name for state in self.states)


def execution_config(config: ModelConfig) -> ModelConfig:
    """``config`` as the backend loads it: the control and state tensors of its
    ``sequence_batching`` added as inputs (and the states as outputs) with dims ``[1]`` for a
    control and the state's dims, so a backend knows nothing of sequences."""
    if not config.HasField("sequence_batching"):
        return config
    extended = ModelConfig()
    extended.CopyFrom(config)
    declared_inputs = {entry.name for entry in extended.input}
    declared_outputs = {entry.name for entry in extended.output}
    section = extended.sequence_batching
    for control_input in section.control_input:
        for control in control_input.control[:1]:
            if control_input.name not in declared_inputs:
                extended.input.add(name=control_input.name, data_type=_control_type(control),
                                   dims=[1])
    for state in section.state:
        if state.input_name not in declared_inputs:
            extended.input.add(name=state.input_name, data_type=state.data_type,
                               dims=list(state.dims))
        if state.output_name not in declared_outputs:
            extended.output.add(name=state.output_name, data_type=state.data_type,
                                dims=list(state.dims))
    return extended


def client_config(completed: ModelConfig, original: ModelConfig) -> ModelConfig:
    """A backend's completed ``execution_config`` without the tensors the server added."""
    if not original.HasField("sequence_batching"):
        return completed
    added_inputs = {entry.name for entry in execution_config(original).input} - {
        entry.name for entry in original.input}
    added_outputs = {entry.name for entry in execution_config(original).output} - {
        entry.name for entry in original.output}
    stripped = ModelConfig()
    stripped.CopyFrom(completed)
    kept_inputs = [e for e in stripped.input if e.name not in added_inputs]
    kept_outputs = [e for e in stripped.output if e.name not in added_outputs]
    del stripped.input[:]
    del stripped.output[:]
    stripped.input.extend(kept_inputs)
    stripped.output.extend(kept_outputs)
    return stripped


def _refuse_unsupported(section: Any, model: str) -> None:
    if section.iterative_sequence:
        raise InvalidArgument(f"model '{model}': sequence_batching.iterative_sequence is not "
                              "supported by inferd")
    if section.HasField("oldest") and section.oldest.preserve_ordering:
        raise InvalidArgument(f"model '{model}': sequence_batching.oldest.preserve_ordering is "
                              "not supported by inferd")
    for state in section.state:
        for field in ("use_same_buffer_for_input_output", "use_growable_memory"):
            if getattr(state, field):
                raise InvalidArgument(
                    f"model '{model}': sequence_batching.state.{field} is not supported by "
                    "inferd (state lives in the server's memory, not on a device)")


def _control_type(control: Any) -> int:
    if control.kind == Control.CONTROL_SEQUENCE_CORRID:
        return int(control.data_type)
    if control.int32_false_true:
        return int(model_config_pb2.TYPE_INT32)
    if control.fp32_false_true:
        return int(model_config_pb2.TYPE_FP32)
    return int(model_config_pb2.TYPE_BOOL)


def _controls(section: Any, model: str) -> tuple[ControlTensor, ...]:
    controls: list[ControlTensor] = []
    seen: set[int] = set()
    for control_input in section.control_input:
        where = f"model '{model}': sequence_batching control input '{control_input.name}'"
        if not control_input.name:
            raise InvalidArgument(f"model '{model}': a sequence_batching control input must "
                                  "specify 'name'")
        if len(control_input.control) != 1:
            raise InvalidArgument(f"{where} must specify exactly one 'control'")
        control = control_input.control[0]
        if control.kind in seen:
            raise InvalidArgument(
                f"{where}: {Control.Kind.Name(control.kind)} is given by more than one input")
        seen.add(control.kind)
        controls.append(_control(control_input.name, control, where))
    return tuple(controls)


def _control(name: str, control: Any, where: str) -> ControlTensor:
    data_type = _control_type(control)
    datatype = config_type_to_datatype(model_config_pb2.DataType.Name(data_type))
    if control.kind == Control.CONTROL_SEQUENCE_CORRID:
        if data_type not in CORRID_TYPES:
            raise InvalidArgument(
                f"{where}: CONTROL_SEQUENCE_CORRID must set 'data_type' to TYPE_UINT64, "
                "TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING")
        return ControlTensor(name, "corrid", datatype)
    forms = [values for values in (control.int32_false_true, control.fp32_false_true,
                                   control.bool_false_true) if values]
    if len(forms) != 1 or len(forms[0]) != 2:
        raise InvalidArgument(
            f"{where}: {Control.Kind.Name(control.kind)} must specify exactly one of "
            "'int32_false_true', 'fp32_false_true' and 'bool_false_true', with two values")
    false, true = forms[0]
    return ControlTensor(name, _FLAG_KINDS[control.kind], datatype, (false, true))


def _state(entry: Any, model: str, model_dir: Path | None) -> StateTensor:
    where = f"model '{model}': sequence_batching state"
    if not entry.input_name or not entry.output_name:
        raise InvalidArgument(f"{where} must specify 'input_name' and 'output_name'")
    if entry.data_type == model_config_pb2.TYPE_INVALID:
        raise InvalidArgument(f"{where} '{entry.input_name}' must specify 'data_type'")
    datatype = config_type_to_datatype(model_config_pb2.DataType.Name(entry.data_type))
    dims = tuple(int(d) for d in entry.dims)
    initial = _initial_state(entry, dims, datatype, where, model_dir)
    return StateTensor(entry.input_name, entry.output_name, datatype, int(entry.data_type),
                       dims, initial)


def _initial_state(entry: Any, dims: tuple[int, ...], datatype: str, where: str,
                   model_dir: Path | None) -> np.ndarray:
    """The state a sequence starts from: its ``initial_state``, else zeros (an empty
    string for BYTES)."""
    name = entry.input_name
    if len(entry.initial_state) > 1:
        raise InvalidArgument(f"State input name '{name}' specified more than once.")
    if not entry.initial_state:
        if any(dim < 0 for dim in dims):
            raise InvalidArgument(f"{where} '{name}' has variable dims {list(dims)}: give it "
                                  "an 'initial_state' with fixed dims")
        return _zeros(dims, datatype)
    initial = entry.initial_state[0]
    if initial.data_type != entry.data_type:
        raise InvalidArgument(f"The data type used for 'initial_state' field of state "
                              f"'{name}' does not match the state data type.")
    if not initial.name:
        raise InvalidArgument(f"Field 'name' must be set when using initial_state for state "
                              f"input '{name}'.")
    shape = tuple(int(d) for d in initial.dims)
    _check_initial_dims(name, shape, dims)
    kind = initial.WhichOneof("state_data")
    if kind == "zero_data":
        return _zeros(shape, datatype)
    if kind != "data_file":
        raise InvalidArgument(f"initial_state setting expects state'{name}' to have "
                              "state_data set")
    if model_dir is None:
        raise InvalidArgument(f"{where} '{name}': initial_state data_file needs the model "
                              "folder")
    return _state_file(model_dir, initial.data_file, shape, datatype, name)


def _check_initial_dims(name: str, shape: Sequence[int], dims: Sequence[int]) -> None:
    if len(shape) != len(dims):
        raise InvalidArgument(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions for state input '{name}'. {len(shape)} != {len(dims)}")
    for have, want in zip(shape, dims, strict=True):
        if have < 0:
            raise InvalidArgument(f"'initial_state' field for state input name '{name}' "
                                  "contains variable dimensions.")
        if want >= 0 and have != want:
            raise InvalidArgument(f"'initial_state' dim for input name '{name}' doesn't "
                                  f"match 'state' dim description. {have} != {want}")


def _state_file(model_dir: Path, filename: str, shape: tuple[int, ...], datatype: str,
                name: str) -> np.ndarray:
    data = read_model_data(model_dir, INITIAL_STATE_FOLDER, filename,
                           f"initial_state data_file of state '{name}'")
    count = int(np.prod(shape, dtype=np.int64))
    if datatype == "BYTES":
        strings: np.ndarray = deserialize_bytes(data, count).reshape(shape)
        return strings
    dtype = numpy_dtype(datatype)
    needed = count * dtype.itemsize
    if len(data) < needed:
        raise InvalidArgument(f"initial_state setting expects {needed} bytes, but the data "
                              f"provided from {filename}only has {len(data)} bytes.")
    return np.frombuffer(data[:needed], dtype=dtype).reshape(shape).copy()


def _zeros(shape: tuple[int, ...], datatype: str) -> np.ndarray:
    if datatype == "BYTES":
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype=numpy_dtype(datatype))
