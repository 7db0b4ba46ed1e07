"""Where the instances of one model version run: the parts a load is split into, one per
executor process.

Pure: a normalized config in, parts out; the executor pool turns each part into an executor
process and a load there. A version's instance groups split as Triton places them:

- its CPU (and ``KIND_MODEL``) instances form one part, on a CPU executor;
- its GPU instances form one part per GPU: a group ``{ kind: KIND_GPU gpus: [0, 1] count: 2 }``
  puts two instances on each of GPU 0 and GPU 1, each GPU's on the executor of that GPU;
- a model that asks for a process of its own (``INFERD_EXECUTOR: "isolated"``) keeps that
  split, in processes no other model shares (one per device);
- a backend that runs each instance in a process of its own (the python backend, like
  Triton's stubs) gets one part per instance, so instances of pure-Python code run at once.

Each part carries the version's instance groups narrowed to its device (a GPU group lists
only that part's GPU) and which of their instances it creates: all of them, or, one process
per instance, the one at its place (``first_instance``, counted across those groups). The
groups keep their counts so that an instance alone in its process still has the name Triton
gives it, ``<group name>_<index in the group>``. Once every part has loaded, their answers
merge back into the version's one (``merged``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.protocols.messages import VersionLoaded

_GPU = model_config_pb2.ModelInstanceGroup.KIND_GPU


@dataclass(frozen=True, slots=True)
class Part:
    """The instances of one version that share one executor process.

    ``gpu`` is their GPU (``None``: the CPU). ``own`` says whether the process is the
    model's own, named by ``suffix`` after the model (``""``, ``"/gpu1"``, ``"/3"``); a
    part that is not its own goes to a shared executor of its device.
    """

    gpu: int | None
    own: bool
    suffix: str
    groups: tuple[bytes, ...]  # serialized ModelInstanceGroup, narrowed to this device
    instance_count: int
    first_instance: int = 0  # this part's first instance, counted across ``groups``

    def config(self, config: ModelConfig) -> bytes:
        """``config`` with only this part's device's instance groups."""
        narrowed = ModelConfig()
        narrowed.CopyFrom(config)
        del narrowed.instance_group[:]
        for group in self.groups:
            narrowed.instance_group.add().ParseFromString(group)
        serialized: bytes = narrowed.SerializeToString()
        return serialized


def split(config: ModelConfig, *, isolated: bool, per_instance: bool) -> list[Part]:
    """The parts of a load of ``config`` (normalized: ``KIND_AUTO`` resolved, GPU groups
    listing their GPUs), CPU first, then GPUs in ascending order."""
    by_device: dict[int | None, list[model_config_pb2.ModelInstanceGroup]] = {}
    for group in config.instance_group:
        if group.kind != _GPU:
            by_device.setdefault(None, []).append(group)
            continue
        for gpu in group.gpus:
            narrowed = model_config_pb2.ModelInstanceGroup()
            narrowed.CopyFrom(group)
            del narrowed.gpus[:]
            narrowed.gpus.append(gpu)
            by_device.setdefault(gpu, []).append(narrowed)
    parts: list[Part] = []
    for gpu in sorted(by_device, key=lambda device: -1 if device is None else device):
        groups = by_device[gpu]
        device_suffix = "" if gpu is None else f"/gpu{gpu}"
        serialized = tuple(g.SerializeToString() for g in groups)
        count = sum(max(1, g.count) for g in groups)
        if not per_instance:
            parts.append(Part(gpu, isolated, device_suffix, serialized, count))
            continue
        for place in range(count):
            parts.append(Part(gpu, True, f"{device_suffix}/{len(parts)}", serialized, 1, place))
    return parts or [Part(None, isolated, "", (), 1)]


def whole(config: ModelConfig) -> Part:
    """Every instance of ``config`` as one part (an executor inside the main process)."""
    groups = tuple(group.SerializeToString() for group in config.instance_group)
    count = sum(max(1, g.count) * (len(g.gpus) if g.kind == _GPU else 1)
                for g in config.instance_group)
    return Part(None, False, "", groups, count or 1)


def merged(config: ModelConfig, loaded: list[tuple[str, VersionLoaded]]) -> VersionLoaded:
    """One answer for a load split over executors: the first part's completed config (auto-
    complete fills the same in every part) with the version's own instance groups again,
    and every instance, as (executor, instance id)."""
    completed = ModelConfig()
    completed.ParseFromString(loaded[0][1].config)
    del completed.instance_group[:]
    completed.instance_group.extend(config.instance_group)
    instances = tuple((name, i) for name, part in loaded for i in part.instance_ids)
    return VersionLoaded(completed.SerializeToString(), tuple(i for _, i in instances),
                         loaded[0][0], instances,
                         tuple(run for _, part in loaded for run in part.warmup))
