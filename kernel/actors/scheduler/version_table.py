"""The scheduler's version table (model -> versions; not the kernel's message router,
``inferd.kernel.runtime.router``): which versions of which models it serves, and which one a
request names (the highest live one when it names none), with Triton's refusals for the
rest: an unknown model, a version never served, a version not ready (loading, or its load
failed), a version being loaded again after its executor died. A model with version labels
(an inferd extension) sends a request that names no version where its ``LabelRoute`` says.
Pure bookkeeping over ``Version`` records."""

from __future__ import annotations

from collections.abc import Iterator

from inferd.kernel.actors.scheduler.label_routing import LabelRoute
from inferd.kernel.actors.scheduler.version import Version
from inferd.protocols.errors import InvalidArgument, NotFound, Unavailable


class RoutingTable:
    def __init__(self) -> None:
        self.served: dict[str, dict[int, Version]] = {}
        self.ever_served: dict[str, set[int]] = {}
        # Models whose load got past their config, and the versions it tried: their
        # requests hear Triton's words for a known model with nothing ready.
        self.known: dict[str, set[int]] = {}
        # Versions retired because their executor died, until they serve again: the reason.
        self.reloading: dict[str, dict[int, str]] = {}
        # Where a request naming no version goes, for models with version labels.
        self.labelled: dict[str, LabelRoute] = {}

    def versions(self) -> Iterator[Version]:
        """Every version held, retired ones still finishing included."""
        for versions in self.served.values():
            yield from versions.values()

    def live(self, model: str) -> list[int]:
        """The version numbers of ``model`` that take requests, in order."""
        return sorted(n for n, v in self.served.get(model, {}).items() if not v.retired)

    def route(self, model: str, version: str) -> Version:
        """``resolve`` for an inference: one that names no version takes its part of a
        labelled model's canary share."""
        return self.resolve(model, version, count=True)

    def resolve(self, model: str, version: str, *, count: bool = False) -> Version:
        """The version a request for ``model`` and ``version`` ("" for the latest, or where
        the model's labels say) goes to."""
        number = version_number(version) if version else -1
        versions = self.served.get(model)
        if not versions and model not in self.ever_served and model not in self.known:
            raise NotFound(f"Request for unknown model: '{model}' is not found")
        live = {n: v for n, v in (versions or {}).items() if not v.retired}
        if not version:
            if not live:
                self._raise_if_reloading(model, None)
                raise NotFound(f"Request for unknown model: '{model}' has no available versions")
            route = self.labelled.get(model)
            chosen = route.pick(live, count=count) if route is not None else None
            return live[max(live) if chosen is None else chosen]
        if number in live:
            return live[number]
        self._raise_if_reloading(model, number)
        if number in self.ever_served.get(model, ()) or number in self.known.get(model, ()):
            raise Unavailable(
                f"Request for unknown model: '{model}' version {number} is not at ready state"
            )
        raise NotFound(f"Request for unknown model: '{model}' version {number} is not found")

    def _raise_if_reloading(self, model: str, number: int | None) -> None:
        """A version whose executor died is being loaded again: say so, retryable (503)."""
        reloading = self.reloading.get(model)
        if not reloading:
            return
        reason = reloading.get(number) if number is not None else reloading[max(reloading)]
        if reason:
            raise Unavailable(f"model '{model}' is being reloaded: {reason}; retry the request")

    def for_statistics(self, model: str, version: str) -> list[Version]:
        """The versions a statistics request names (all, a model's, or one), in order."""
        if not model:
            chosen = list(self.versions())
        else:
            if not self.ever_served.get(model):
                raise InvalidArgument(f"requested model '{model}' is not available")
            versions = self.served.get(model, {})
            if version:
                chosen = [v for n, v in versions.items() if str(n) == version]
                if not chosen:
                    raise InvalidArgument(
                        f"requested model '{model}' version {version} is not available")
            else:
                chosen = list(versions.values())
        chosen.sort(key=lambda v: (v.model, v.version))
        return chosen


def version_number(text: str) -> int:
    """A requested version string as its number, refused in Triton's words (which clients
    match on). Stricter than Triton's ``stol``: trailing characters ("1abc") are refused too."""
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in "+-" else stripped
    if not (digits.isascii() and digits.isdigit()):
        raise InvalidArgument(
            f"failed to get model version from specified version string '{text}' (details: "
            "stol), version should be an integral value > 0")
    number = int(stripped)
    if number < 0:
        raise InvalidArgument(
            f"invalid model version specified '{text}' , version should be an integral value > 0")
    return number
