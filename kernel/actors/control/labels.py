"""Control's part in version labels (an inferd extension): which labels each model has, what
a load makes of its ``version_labels.toml``, and the managed switch when a label moves.

The file is the declaration, read by every load of the model in every control mode: it is
taken when the model first loads and again whenever what it says changes; a label moved at run
time (``LabelsRequest``) holds until then, so a reload after an executor restart or a poll
of an untouched file keeps it. A load brings up the versions the labels name besides the
policy's, and publishes the labels to the scheduler (``RouteLabels``) once they serve.

Moving a label is a switch no request notices: the routing of requests that name no version
is pinned first (a model without labels sends them to its highest version, which the new
target may be); the target is loaded and warmed up beside what serves (a version that fails
changes nothing); the labels move in one message to the scheduler; and only then does the
version the label left unload, unless another label or the version policy keeps it, once
the requests it holds have finished. Owns the labels and the per-model lock that serializes
switches; loading and unloading are the actor's, passed in.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping

import anyio

from inferd.kernel.actors.control.model_status import ModelStatus, State
from inferd.kernel.modelconfig.version_labels import (
    CANARY,
    STABLE,
    VersionLabels,
    label_problem,
    percent_problem,
)
from inferd.kernel.runtime.addresses import SCHEDULER
from inferd.kernel.runtime.router import Router
from inferd.protocols.errors import InferdError, InvalidArgument
from inferd.protocols.messages import LabelsRequest, ResolvedModel, RouteLabels, VersionLabelsReply
from inferd.protocols.names import check_model_name

LoadVersions = Callable[[str, tuple[int, ...], str], Awaitable[None]]
"""``load(name, versions, cause)``: load exactly these versions, leaving the others."""
UnloadVersion = Callable[[str, int, str], Awaitable[None]]
"""``unload(name, version, cause)``: unload one version once its requests have finished."""


class VersionLabelBook:
    def __init__(self, router: Router, models: Mapping[str, ModelStatus], *,
                 load_versions: LoadVersions, unload_version: UnloadVersion) -> None:
        self._router = router
        self._models = models
        self._load_versions = load_versions
        self._unload_version = unload_version
        self._labels: dict[str, VersionLabels] = {}
        self._from_file: dict[str, VersionLabels | None] = {}  # what each file said last
        self._policy: dict[str, tuple[int, ...]] = {}  # what each policy selected last
        self._switching: defaultdict[str, anyio.Lock] = defaultdict(anyio.Lock)

    def of(self, name: str) -> VersionLabels:
        return self._labels.get(name, VersionLabels())

    def holder(self, name: str, number: int) -> str:
        """The label that names version ``number`` of ``name`` ("" when none does)."""
        return next((label for label, version in sorted(self.of(name).labels.items())
                     if version == number), "")

    # ------------------------------------------------------------------ loads

    def for_load(self, resolved: ResolvedModel) -> VersionLabels:
        """The labels ``resolved``'s model will have once this load serves: the file's, when
        it is new or changed, else those it has."""
        name = resolved.model
        in_file = VersionLabels(dict(resolved.labels), resolved.canary_percent) \
            if resolved.labels_file else None
        if name in self._from_file and self._from_file[name] == in_file:
            return self.of(name)
        return in_file or VersionLabels()

    async def loaded(self, resolved: ResolvedModel, labels: VersionLabels) -> None:
        """A load of every version (``for_load``'s ``labels``) serves: its labels route."""
        name = resolved.model
        self._from_file[name] = VersionLabels(dict(resolved.labels), resolved.canary_percent) \
            if resolved.labels_file else None
        self._policy[name] = resolved.policy_versions
        if labels != self.of(name):  # a model without labels tells the scheduler nothing
            self._labels[name] = labels
            await self._publish(name, labels)

    # ------------------------------------------------------------------ the labels API

    async def change(self, request: LabelsRequest) -> VersionLabelsReply:
        """Move ``request.model``'s labels (a request that changes nothing reads them)."""
        name = request.model
        check_model_name(name)
        if name not in self._models and name not in self._labels:  # no lock kept for it
            if _changed(VersionLabels(), request) == VersionLabels():
                return _reply(name, VersionLabels())
            raise InvalidArgument(f"model '{name}' is not loaded: load it before moving "
                                  "its version labels")
        async with self._switching[name]:
            current = self.of(name)
            wanted = _changed(current, request)
            if wanted == current:
                return _reply(name, current)
            model = self._models.get(name)
            if model is None or not model.ready():
                raise InvalidArgument(f"model '{name}' is not loaded: load it before moving "
                                      "its version labels")
            cause = "version label " + (", ".join(
                f"{label}={version}" for label, version in sorted(wanted.labels.items())
                if current.labels.get(label) != version) or "change")
            pinned = VersionLabels({**current.labels, STABLE: current.labels.get(
                STABLE, max(model.serving()))}, current.canary_percent)
            await self._publish(name, pinned)
            try:
                missing = tuple(n for n in wanted.targets() if not _ready(model, n))
                if missing:
                    await self._load_versions(name, missing, cause)
            except InferdError:
                await self._publish(name, current)  # as before: nothing changed
                raise
            self._labels[name] = wanted
            await self._publish(name, wanted)
            kept = set(wanted.targets()) | set(self._policy.get(name, ()))
            for number in sorted(set(pinned.targets()) - kept):
                if _ready(model, number):
                    await self._unload_version(
                        name, number, "no version label or version policy keeps it")
            return _reply(name, wanted)

    async def _publish(self, name: str, labels: VersionLabels) -> None:
        """The scheduler routes by ``labels`` from its next request on."""
        await self._router.ask(SCHEDULER, RouteLabels(
            name, labels.labels.get(STABLE, 0), labels.labels.get(CANARY, 0),
            labels.canary_percent))


def _ready(model: ModelStatus, number: int) -> bool:
    version = model.versions.get(number)
    return version is not None and version.state == State.READY


def _changed(current: VersionLabels, request: LabelsRequest) -> VersionLabels:
    """``current`` with ``request``'s changes, each checked first."""
    for label, version in sorted(request.labels.items()):
        if problem := label_problem(label, version):
            raise InvalidArgument(problem)
    for label in request.remove:
        if problem := label_problem(label, 1):
            raise InvalidArgument(problem)
        if label in request.labels:
            raise InvalidArgument(f"label '{label}' is both set and removed")
    percent = current.canary_percent
    if request.canary_percent != -1.0:  # -1: unchanged
        if problem := percent_problem(request.canary_percent):
            raise InvalidArgument(problem)
        percent = float(request.canary_percent)
    labels = {label: version for label, version in current.labels.items()
              if label not in request.remove}
    labels.update(request.labels)
    return VersionLabels(dict(sorted(labels.items())), percent)


def _reply(name: str, labels: VersionLabels) -> VersionLabelsReply:
    return VersionLabelsReply(name, dict(labels.labels), labels.canary_percent)
