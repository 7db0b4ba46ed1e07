"""Model warm-up (``model_warmup``): requests run on every instance before a version is READY.

Owns Triton's rules (``backend_model_instance.cc``): a sample of ``batch_size`` requests (a
sample of batch size 0 is skipped), each with a batch dimension of 1 when the model batches,
run together ``count`` times (at least once); an input is ``zero_data``, ``random_data``
(zeros for strings) or ``input_data_file``, a file of the model's ``warmup/`` folder (raw
bytes, length-prefixed elements for strings); every dimension must be fixed; every input
the model requires must be there (one it does not have is passed on). A sample whose
requests fail (a ``batch_size`` above ``max_batch_size`` fails as Triton's backends refuse
it) fails the load with Triton's "failed to run warmup sample '<name>': ...". Warm-up runs
straight on the instances in the executor; each execution is handed back (an ``Execution``)
so the version's statistics count it, as Triton's do. No sockets: it calls
``Instance.execute`` and waits.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.repository.folders import read_model_data
from inferd.kernel.actors.scheduler.request_validation import ModelSignature, check_required_inputs
from inferd.kernel.sdk.backends import Instance
from inferd.protocols.errors import InferdError, InvalidArgument
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import config_type_to_datatype, deserialize_bytes, numpy_dtype

WARMUP_FOLDER = "warmup"
DECOUPLED_WAIT_SECS = 60.0
# One execution: (batch size, requests, input ns, infer ns, output ns), for the statistics.
Execution = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class WarmupSample:
    name: str
    requests: tuple[InferRequest, ...]
    count: int


def warmup_samples(config: ModelConfig, version: int, model_dir: Path) -> list[WarmupSample]:
    """The samples of ``config``'s ``model_warmup``, their data made or read."""
    samples = []
    rng = np.random.default_rng()
    signature = ModelSignature.from_config(config)
    for setting in config.model_warmup:
        if setting.batch_size == 0:
            continue
        tensors = tuple(_tensor(name, spec, config, model_dir, rng)
                        for name, spec in sorted(setting.inputs.items()))
        # As Triton's: an input the model does not have is passed on as an extra one (a
        # control input), and does not count for the model's own, which must all be there.
        try:
            check_required_inputs("", signature,
                                  sorted(set(setting.inputs) & set(signature.inputs)))
        except InvalidArgument as error:
            raise InvalidArgument(f"Invalid argument: {error.message}") from None
        request = InferRequest(config.name, tensors, version=str(version),
                               id=f"warmup '{setting.name}'")
        samples.append(WarmupSample(setting.name, (request,) * setting.batch_size,
                                    max(1, setting.count)))
    return samples


def _tensor(name: str, spec: model_config_pb2.ModelWarmup.Input, config: ModelConfig,
            model_dir: Path, rng: np.random.Generator) -> Tensor:
    dims = tuple(int(d) for d in spec.dims)
    if any(d < 0 for d in dims):
        raise InvalidArgument("warmup setting expects all variable-size dimensions are "
                              f"specified for input '{name}'")
    datatype = config_type_to_datatype(model_config_pb2.DataType.Name(spec.data_type))
    count = int(np.prod(dims, dtype=np.int64))
    kind = spec.WhichOneof("input_data_type")
    if kind is None:
        raise InvalidArgument(f"warmup setting expects input '{name}' to have "
                              "input_data_type set")
    if datatype == "BYTES":
        data = (_file_bytes(model_dir, spec.input_data_file, name, None)
                if kind == "input_data_file" else None)
        array = (deserialize_bytes(data, count) if data is not None
                 else np.full(count, b"", dtype=object))
    else:
        dtype = numpy_dtype(datatype)
        size = count * dtype.itemsize
        if kind == "zero_data":
            array = np.zeros(count, dtype)
        elif kind == "random_data":
            array = np.frombuffer(rng.bytes(size), dtype).copy()
        else:
            raw = _file_bytes(model_dir, spec.input_data_file, name, size)
            array = np.frombuffer(raw[:size], dtype).copy()
    is_model_input = any(entry.name == name for entry in config.input)
    shape = ((1, *dims) if config.max_batch_size > 0 and is_model_input else dims)
    return Tensor(name, datatype, shape, array.reshape(shape))


def _file_bytes(model_dir: Path, filename: str, name: str, needed: int | None) -> bytes:
    path = model_dir / WARMUP_FOLDER / filename
    if not path.is_file():  # Triton's words for a file it cannot open, then which input
        reason = os.strerror(errno.EISDIR if path.is_dir() else errno.ENOENT)
        raise InvalidArgument(f"failed to open text file for read {path}: {reason} "
                              f"(the input_data_file of warmup input '{name}')")
    data: bytes = read_model_data(model_dir, WARMUP_FOLDER, filename,
                                  f"warmup input_data_file of input '{name}'")
    if needed is not None and len(data) < needed:
        raise InvalidArgument(f"warmup setting expects {needed} bytes, but the data provided "
                              f"from {filename}only has {len(data)} bytes")
    return data


def instance_names(config: ModelConfig, model: str) -> list[str]:
    """Triton's name of each instance, in order: ``<group name>_<index in the group>``, a
    group without a name being ``<model>_<group index>``."""
    names = [f"{group.name or f'{model}_{number}'}_{index}"
             for number, group in enumerate(config.instance_group)
             for index in range(max(1, group.count))]
    return names or [f"{model}_0_0"]


def warm_up(instances: Sequence[Instance], samples: Sequence[WarmupSample],
            config: ModelConfig, first_instance: int = 0) -> list[Execution]:
    """Run every sample on every instance (numbers ``first_instance`` on, counted across the
    config's groups); raise Triton's error for the first that fails. The executions that ran,
    for the statistics."""
    decoupled = config.model_transaction_policy.decoupled
    names = instance_names(config, config.name)
    executions: list[Execution] = []
    for index, instance in enumerate(instances, first_instance):
        for sample in samples:
            for _ in range(sample.count):
                size = len(sample.requests)
                if size != 1 and size > config.max_batch_size:
                    # What Triton's backends answer each request of a batch too big.
                    name = names[index] if index < len(names) else names[-1]
                    errors = [f"batch size {size} for '{name}', max allowed is "
                              f"{config.max_batch_size}"] * size
                else:
                    errors, compute_ns = _run(instance, sample.requests, decoupled)
                if errors:
                    raise InvalidArgument(
                        "Invalid argument: failed to run warmup sample "
                        f"'{sample.name}': " + "".join(f"{error}; " for error in errors))
                executions.append((size, size, *compute_ns))
    return executions


def _run(instance: Instance, requests: Sequence[InferRequest], decoupled: bool
         ) -> tuple[list[str], tuple[int, int, int]]:
    """The errors of one execution and its (input, infer, output) nanoseconds."""
    started = time.perf_counter_ns()
    if not decoupled:
        instance.phase_ns = None
        results = instance.execute(requests)
        total = time.perf_counter_ns() - started
        return ([result.message for result in results if isinstance(result, InferdError)],
                instance.phase_ns or (0, total, 0))
    errors: list[str] = []
    finished: set[int] = set()
    done = threading.Event()
    lock = threading.Lock()

    def emit(index: int, result: InferResponse | InferdError | None, final: bool) -> None:
        with lock:
            if isinstance(result, InferdError):
                errors.append(result.message)
            if final:
                finished.add(index)
                if len(finished) == len(requests):
                    done.set()

    instance.execute_decoupled(requests, emit)
    if not done.wait(DECOUPLED_WAIT_SECS):
        errors.append(f"the decoupled model sent no final response within "
                      f"{DECOUPLED_WAIT_SECS:g} s")
    return errors, (0, time.perf_counter_ns() - started, 0)
