"""The data plane's part in ``--model-load-on-demand`` (an inferd extension): a request the
scheduler answers with Triton's words for a model it does not serve goes once more to it
after control has loaded the model (``LoadOnDemand``).

Owns which answers mean "not loaded" (``Request for unknown model: ...`` and a ready request's
``false``), the one retry after the load, and what the request hears when the load does not
happen: the scheduler's own answer when the repository has no such model, control's reason
otherwise. Requests for models that serve never pay more than without it. The loading, its
waiters and its back-off are control's (``inferd.plugins.on_demand.loads``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from inferd.protocols.errors import InferdError, NotFound, Unavailable
from inferd.protocols.messages import HealthStatus, LoadOnDemand, Message, ModelReadyRequest

UNKNOWN_MODEL = "Request for unknown model: "
# Beyond --model-load-on-demand-timeout-secs, control's own bound on the wait.
_ASK_MARGIN_SECS = 30.0


def not_loaded(error: InferdError) -> bool:
    """Whether ``error`` is the scheduler's answer for a model (or version) not served."""
    return isinstance(error, (NotFound, Unavailable)) and error.message.startswith(UNKNOWN_MODEL)


class OnDemandRequests:
    """``ask_control(message, timeout)``: ask the control actor."""

    def __init__(self, ask_control: Callable[[Message, float], Awaitable[Message]],
                 timeout_secs: float) -> None:
        self._ask_control = ask_control
        self._ask_timeout = timeout_secs + _ASK_MARGIN_SECS

    async def call(self, send: Callable[[], Awaitable[Message]], request: Message,
                   model: str) -> Message:
        """``send()``'s answer; when it says ``model`` is not loaded, loaded first."""
        try:
            reply = await send()
        except InferdError as error:
            if not not_loaded(error):
                raise
            await self._load(model, error)
            return await send()
        if isinstance(request, ModelReadyRequest) and isinstance(reply, HealthStatus) \
                and not reply.ok:
            try:
                await self._load(model, None)
            except InferdError:
                return reply
            return await send()
        return reply

    async def _load(self, model: str, original: InferdError | None) -> None:
        try:
            await self._ask_control(LoadOnDemand(model), self._ask_timeout)
        except NotFound:
            if original is not None:
                raise original from None  # not in the repository: Triton's answer
            raise
