"""What an unload of single versions (an inferd extension: ``versions`` in an unload
request) may do, checked before anything unloads.

Triton loads and unloads a model whole; inferd's ``versions`` parameter names the versions a
load or unload touches and leaves the others serving (a load of single versions is the
control actor's whole-or-nothing load, limited to them). An unload is refused, changing
nothing, when the model is not loaded, when a version named is not READY, or when a version
label names it (moving the label first unloads it, without a failed request).
"""

from __future__ import annotations

from collections.abc import Callable

from inferd.kernel.actors.control.model_status import ModelStatus, State
from inferd.protocols.errors import InvalidArgument


def check_unload_versions(name: str, model: ModelStatus | None, versions: tuple[int, ...],
                          label_of: Callable[[str, int], str]) -> None:
    """Refuse an unload of ``versions`` of ``name`` that cannot be done as asked.
    ``label_of(name, number)`` is the label naming a version, "" when none does."""
    if model is None or not model.versions:
        raise InvalidArgument(f"failed to unload '{name}': the model is not loaded")
    for number in versions:
        if number < 1:
            raise InvalidArgument(f"failed to unload '{name}': version {number} is not a "
                                  "version number (an integer >= 1)")
        version = model.versions.get(number)
        if version is None or version.state != State.READY:
            state = version.state if version is not None else "not loaded"
            raise InvalidArgument(f"failed to unload '{name}': version {number} is not "
                                  f"loaded (its state: {state})")
        label = label_of(name, number)
        if label:
            raise InvalidArgument(f"failed to unload '{name}': version {number} is labelled "
                                  f"'{label}'; move the label first")
