"""When a load may keep a version that already serves instead of loading it again.

Owns Triton's rule for "unchanged" (core's ``ModelLifeCycle::AsyncLoad``): a READY version
is kept, instances and all, when its own version folder and the model folder's other files
(everything but the config file and the version folders) are as they were when it loaded,
it is loaded from the same folder, and the new config differs from its config in
``version_policy`` alone. So a version-policy change, or a new version folder, brings up
only the versions that are new and retires only the ones the policy dropped; any other
config change loads every version again. (Triton also updates ``instance_group`` changes
in place; inferd loads the version again for them.) Pure: serialized configs in, bytes out.
"""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig


def load_signature(resolved_config: bytes) -> bytes:
    """What must be equal in two resolved configs (serialized ``ModelConfig``) for a
    version loaded with one to serve the other: the config without its version policy."""
    config = ModelConfig.FromString(resolved_config)
    config.ClearField("version_policy")
    signature: bytes = config.SerializeToString(deterministic=True)
    return signature


def with_version_policy(served_config: bytes, resolved_config: bytes) -> bytes:
    """``served_config`` (the auto-completed config a kept version serves with) carrying the
    version policy of ``resolved_config``, the config of the load that keeps it."""
    served = ModelConfig.FromString(served_config)
    served.version_policy.CopyFrom(ModelConfig.FromString(resolved_config).version_policy)
    updated: bytes = served.SerializeToString()
    return updated
