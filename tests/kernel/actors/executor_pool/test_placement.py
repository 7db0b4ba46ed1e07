"""How a load splits over executor processes (inferd.kernel.actors.executor_pool.placement), driven
directly."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.executor_pool.placement import split, whole
from inferd.kernel.modelconfig.reading import parse_config_text

KIND = model_config_pb2.ModelInstanceGroup


def config(groups: str) -> ModelConfig:
    return parse_config_text(f'name: "m" backend: "b" instance_group [ {groups} ]', "c")


def groups_of(part_config: bytes) -> list[tuple[int, int, list[int]]]:
    narrowed = ModelConfig()
    narrowed.ParseFromString(part_config)
    return [(g.kind, g.count, list(g.gpus)) for g in narrowed.instance_group]


def test_cpu_instances_share_a_part_and_gpu_instances_split_per_gpu() -> None:
    source = config("{ kind: KIND_CPU count: 2 }, { kind: KIND_GPU count: 2 gpus: [1, 0] },"
                    " { kind: KIND_GPU count: 1 gpus: [1] }, { kind: KIND_MODEL }")
    parts = split(source, isolated=False, per_instance=False)
    assert [(p.gpu, p.own, p.suffix, p.instance_count) for p in parts] == [
        (None, False, "", 3), (0, False, "/gpu0", 2), (1, False, "/gpu1", 3)]
    assert groups_of(parts[0].config(source)) == [(KIND.KIND_CPU, 2, []), (KIND.KIND_MODEL, 0, [])]
    assert groups_of(parts[1].config(source)) == [(KIND.KIND_GPU, 2, [0])]
    assert groups_of(parts[2].config(source)) == [(KIND.KIND_GPU, 2, [1]), (KIND.KIND_GPU, 1, [1])]


def test_an_isolated_model_keeps_the_split_in_processes_of_its_own() -> None:
    source = config("{ kind: KIND_CPU }, { kind: KIND_GPU gpus: [0] }")
    parts = split(source, isolated=True, per_instance=False)
    assert [(p.gpu, p.own, p.suffix) for p in parts] == [(None, True, ""), (0, True, "/gpu0")]


def test_a_process_per_instance_gives_every_instance_a_part() -> None:
    """Each part keeps its device's groups whole and names its instance's place in them, so
    the instance is named as Triton names it (the second of group 0: ``m_0_1``)."""
    source = config("{ kind: KIND_CPU count: 2 }, { kind: KIND_CPU count: 1 },"
                    " { kind: KIND_GPU count: 1 gpus: [0, 1] }")
    parts = split(source, isolated=False, per_instance=True)
    assert [(p.gpu, p.own, p.suffix, p.instance_count, p.first_instance) for p in parts] == [
        (None, True, "/0", 1, 0), (None, True, "/1", 1, 1), (None, True, "/2", 1, 2),
        (0, True, "/gpu0/3", 1, 0), (1, True, "/gpu1/4", 1, 0)]
    cpu_groups = [(KIND.KIND_CPU, 2, []), (KIND.KIND_CPU, 1, [])]
    assert all(groups_of(part.config(source)) == cpu_groups for part in parts[:3])
    assert groups_of(parts[4].config(source)) == [(KIND.KIND_GPU, 1, [1])]


def test_whole_is_every_instance_in_one_part() -> None:
    source = config("{ kind: KIND_CPU count: 2 }, { kind: KIND_GPU count: 2 gpus: [0, 1] }")
    part = whole(source)
    assert (part.gpu, part.own, part.instance_count) == (None, False, 6)
    assert groups_of(part.config(source)) == groups_of(source.SerializeToString())
