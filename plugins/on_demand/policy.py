"""Models on demand and the memory budget as one control policy (``--model-load-on-demand``,
``--model-memory-budget``): what the control actor calls at the points of the lifecycle this
plugin takes part in.

Owns the choice of what is on (``open_policy``, from the flags ``inferd.plugins.on_demand``
declares), the loads a request starts (``loads``), the budget a load must fit (``budget``) and
the data plane's retry after an on-demand load (``requests``). A load within the budget first
asks the repository what it is: an ensemble holds nothing (its composing models load
within the budget themselves), and a name the repository refuses loads as without a budget,
saying why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.sdk import MemoryMeter
from inferd.kernel.sdk.control import (
    ControlHandle,
    ControlPolicy,
    OpenedPolicy,
    PolicySetup,
    Sample,
)
from inferd.plugins.on_demand.budget import MemoryBudget, NoRoom
from inferd.plugins.on_demand.budget_rules import is_pinned, parse_budget
from inferd.plugins.on_demand.loads import OnDemandLoads
from inferd.plugins.on_demand.requests import OnDemandRequests
from inferd.protocols.errors import InferdError
from inferd.protocols.messages import IndexEntry
from inferd.protocols.names import check_model_name

ON_DEMAND = "model_load_on_demand"
TIMEOUT = "model_load_on_demand_timeout_secs"
BUDGET = "model_memory_budget"


@dataclass(frozen=True, slots=True)
class OnDemandSettings:
    on_demand: bool
    timeout_secs: float
    budget: tuple[tuple[str, int], ...]  # bytes per device, () for none


def settings_from(setup: PolicySetup) -> OnDemandSettings:
    """The flags' values, checked as tritonserver checks its own (``ValueError``)."""
    options = setup.options
    on_demand, text = bool(options.get(ON_DEMAND, False)), str(options.get(BUDGET, "") or "")
    if on_demand and setup.control_mode == "none":
        raise ValueError("Use of '--model-load-on-demand' requires setting "
                         "'--model-control-mode=explicit' or 'poll' as well.")
    budget: tuple[tuple[str, int], ...] = ()
    if text:
        if setup.control_mode == "none":
            raise ValueError("Use of '--model-memory-budget' requires setting "
                             "'--model-control-mode=explicit' or 'poll' as well.")
        try:
            budget = parse_budget(text, MemoryMeter().total)
        except ValueError as error:
            raise ValueError(f"--model-memory-budget={text}: {error}") from None
    return OnDemandSettings(on_demand, float(options.get(TIMEOUT, 60.0)), budget)


def open_policy(setup: PolicySetup) -> OpenedPolicy | None:
    """``ControlPolicySpec.open``: None when neither flag is given."""
    chosen = settings_from(setup)
    if not chosen.on_demand and not chosen.budget:
        return None
    unserved = (OnDemandRequests(setup.ask_control, chosen.timeout_secs)
                if chosen.on_demand else None)
    return OpenedPolicy(lambda control: OnDemandPolicy(control, chosen), unserved)


class OnDemandPolicy(ControlPolicy):
    def __init__(self, control: ControlHandle, chosen: OnDemandSettings) -> None:
        self._control = control
        self.loads_on_request = chosen.on_demand
        self._loads = OnDemandLoads(
            timeout_secs=chosen.timeout_secs, load=self._load_on_demand,
            is_ready=control.is_ready, spawn=control.spawn,
        ) if chosen.on_demand else None
        self._budget = MemoryBudget(
            chosen.budget, changing=control.is_changing, usage=control.usage,
            pinned=self._pinned, ensembles_using=control.ensembles_using, evict=control.evict,
        ) if chosen.budget else None

    async def requested(self, name: str) -> bool:
        if self._loads is None:
            return False
        check_model_name(name)
        if self._budget is not None:
            self._budget.touch(name)
        await self._loads.ensure(name)
        return True

    def load_requested(self, name: str) -> None:
        if self._loads is not None:
            self._loads.forget_failure(name)

    async def _load_on_demand(self, name: str) -> None:
        await self._control.load(name, "on demand: a request for it")

    async def around_load(self, name: str, config_override: str,
                          load: Callable[[], Awaitable[None]]) -> None:
        """``load``, within ``--model-memory-budget`` when there is one: what must go to make
        room for it goes first (``budget``), and its footprint is kept."""
        if self._budget is None:
            return await load()
        try:
            check_model_name(name)
            resolved = await self._control.resolve(name, config_override)
        except InferdError:
            return await load()  # it says why, as without a budget
        if not resolved.backend:
            return await load()  # an ensemble holds nothing; its composing models load here
        try:
            await self._budget.load_within(name, ModelConfig.FromString(resolved.config),
                                           resolved.path, load)
        except NoRoom as error:
            if not self._control.is_ready(name):  # the index says why it is not loaded
                self._control.note_failure(name, error.message)
            raise

    def unloaded(self, name: str) -> None:
        if self._budget is not None:
            self._budget.unloaded(name)

    async def annotate(self, entries: tuple[IndexEntry, ...]) -> tuple[IndexEntry, ...]:
        if self._budget is None:  # each READY version's footprint and last use
            return entries
        return self._budget.annotate(entries, await self._control.usage())

    def metrics(self) -> list[Sample]:
        samples: list[Sample] = []
        if self._loads is not None:
            samples += self._loads.metrics()
        if self._budget is not None:
            samples += self._budget.metrics()
        return samples

    def _pinned(self, name: str) -> bool:
        return self._control.named_at_start(name) or any(
            is_pinned(ModelConfig.FromString(config))
            for config in self._control.loaded_configs(name) if config)



