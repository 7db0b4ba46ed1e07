"""Opening ``--model-control-state`` at start-up: its flags checked as tritonserver checks
its own, the store its URL names (the one whose scheme it has; a plain path has none), and
the record read before anything loads. One that cannot be read (or parsed, or that a newer
inferd wrote) fails the start rather than starting empty.
"""

from __future__ import annotations

import logging

from inferd.kernel.sdk import ControlStateStore, ControlStateStoreRegistry, RecordError
from inferd.kernel.sdk.control import OpenedPolicy, PolicySetup
from inferd.plugins.control_state.record import ControlStateRecord

log = logging.getLogger(__name__)

RECORD = "model_control_state"
POLL_SECS = "model_control_state_poll_secs"


def open_store(where: str, stores: ControlStateStoreRegistry) -> ControlStateStore:
    """The store of ``--model-control-state``: the one whose scheme ``where`` has."""
    scheme, separator, _ = where.partition("://")
    scheme = scheme.lower() if separator else ""
    specs = sorted(stores, key=lambda spec: spec.scheme)  # a plain path first
    for spec in specs:
        if spec.scheme == scheme:
            return spec.open(where)
    takes = " or ".join(spec.described for spec in specs) or "nothing (no store is installed)"
    raise RecordError(f"{where}: --model-control-state takes {takes}")


def open_record(setup: PolicySetup) -> OpenedPolicy | None:
    """``ControlPolicySpec.open``: None without ``--model-control-state``; ``ValueError``
    for a flag refused or a record that cannot be read."""
    where = str(setup.options.get(RECORD, "") or "")
    poll_secs = float(setup.options.get(POLL_SECS, 5.0))
    if poll_secs < 0:
        raise ValueError("--model-control-state-poll-secs must be 0 or more")
    if not where:
        return None
    if setup.control_mode != "explicit":
        raise ValueError("Use of '--model-control-state' requires setting "
                         "'--model-control-mode=explicit' as well.")
    try:
        store = open_store(where, setup.control_state_stores)
        start = store.read()
    except RecordError as error:
        raise ValueError(f"--model-control-state {error}") from None
    log.info("control-state record %s: generation %d, %d model(s)", store.where,
             start[0].generation, len(start[0].models))
    return OpenedPolicy(lambda control: ControlStateRecord(control, store, start,
                                                           poll_secs=poll_secs))
