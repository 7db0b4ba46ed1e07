"""Triton's restricted APIs: groups of endpoints that answer only requests carrying a header
with an agreed value (``--http-restricted-api`` and ``--grpc-restricted-protocol``, each
``<group>[,<group>...]:<key>=<value>``).

Owns the group names and which HTTP route or gRPC method belongs to which, parsing the flags
(an empty or unknown group, an empty key or value, or a group restricted twice, is refused),
and the check: the header's value is compared in constant time, and a refusal says which
header it expected, in Triton's words. Pure: no sockets.
"""

from __future__ import annotations

import argparse
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

GROUPS = ("health", "metadata", "inference", "shared-memory", "model-config",
          "model-repository", "statistics", "trace", "logging")

GRPC_METHOD_GROUPS = {
    "ServerLive": "health", "ServerReady": "health", "ModelReady": "health",
    "ServerMetadata": "metadata", "ModelMetadata": "metadata",
    "ModelInfer": "inference", "ModelStreamInfer": "inference",
    "ModelConfig": "model-config", "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository", "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory", "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory", "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory", "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace", "LogSettings": "logging",
}
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


@dataclass(frozen=True, slots=True)
class Restriction:
    """The header ``key`` (lower case) that must carry ``value``."""

    key: str
    value: str

    def allows(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.value.encode())


def parse_restriction(text: str) -> tuple[tuple[str, ...], str, str]:
    """An argparse ``type``: ``<groups>:<key>=<value>`` as (groups, key, value)."""
    groups_text, colon, header = text.partition(":")
    key, equals, value = header.partition("=")
    groups = tuple(group.strip() for group in groups_text.split(","))
    problem = ("" if colon and equals else "no ':' or no '='") or next(
        (f"{what} is empty" for what, empty in (
            ("an API group", not all(groups)), ("the header key", not key.strip()),
            ("the header value", not value)) if empty), "")
    if problem:
        # Triton refuses these too (an empty name, setting or value fails its parse).
        raise argparse.ArgumentTypeError(
            f"expected <group>[,<group>...]:<key>=<value>, got {text!r}: {problem}")
    unknown = [group for group in groups if group not in GROUPS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown API group {unknown[0]!r}; the groups are {', '.join(GROUPS)}")
    return groups, key.strip().lower(), value


def restrictions(specs: Iterable[tuple[tuple[str, ...], str, str]], flag: str
                 ) -> dict[str, Restriction]:
    """The restriction of each group; ``ValueError`` for a group restricted twice."""
    by_group: dict[str, Restriction] = {}
    for groups, key, value in specs:
        for group in groups:
            if group in by_group:
                raise ValueError(f"{flag}: API group '{group}' is restricted more than once")
            by_group[group] = Restriction(key, value)
    return by_group


def http_refusal(restriction: Restriction) -> str:
    return f"This API is restricted, expecting header '{restriction.key}'"


def grpc_refusal(restriction: Restriction) -> str:
    return (f"This protocol is restricted, expecting header "
            f"'{GRPC_HEADER_PREFIX}{restriction.key}'")
