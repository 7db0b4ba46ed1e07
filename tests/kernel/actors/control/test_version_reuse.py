"""Triton's rule for a version a load may keep: the config's signature leaves out only the
version policy, and a kept version's served config takes the new policy."""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.control.version_reuse import load_signature, with_version_policy

BASE = 'name: "m" backend: "python" max_batch_size: 4 '


def config(text: str) -> bytes:
    parsed: bytes = text_format.Parse(BASE + text, ModelConfig()).SerializeToString()
    return parsed


def test_the_signature_ignores_the_version_policy_and_nothing_else() -> None:
    latest = config("version_policy { latest { num_versions: 1 } }")
    every = config("version_policy { all { } }")
    assert load_signature(latest) == load_signature(every) == load_signature(config(""))
    assert load_signature(config('output [ { name: "O" } ]')) != load_signature(latest)
    assert load_signature(config('instance_group [ { count: 2 } ]')) != load_signature(latest)


def test_a_kept_version_serves_with_the_new_policy() -> None:
    served = config('version_policy { latest { num_versions: 1 } } '
                    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]')
    updated = ModelConfig.FromString(
        with_version_policy(served, config("version_policy { specific { versions: [ 2 ] } }")))
    assert list(updated.version_policy.specific.versions) == [2]
    assert [i.name for i in updated.input] == ["IN"]  # what auto-complete added stays
