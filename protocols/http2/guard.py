"""What the loop gRPC server's HTTP/2 (``inferd.protocols.http2.connection``) refuses of a peer
beyond framing: RFC 9113 section 8's rules for a request's header list, the budgets that end a
connection whose frames cost the server work without serving a call (rapid reset, control
frame floods, Huffman-heavy headers), and gRPC's ping policy.

A budget is a leaky bucket: each charge adds to its level, the level drains at a tenth of
the burst a second and by the credits the work a call does earns back, and a level above the
burst is a flood. The clock is the caller's. No I/O; compiled with mypyc with ``http2``.
"""

from __future__ import annotations

from typing import Final

from inferd.protocols.http2.hpack import Headers

# Request pseudo-header fields (RFC 9113 section 8.3.1); ``:protocol`` (RFC 8441) is not
# spoken here.
_REQUEST_PSEUDO: Final = frozenset({":method", ":scheme", ":path", ":authority"})
# Connection-specific fields have no meaning in HTTP/2 (section 8.2.2).
_CONNECTION_SPECIFIC: Final = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"})
# Octets a field name may not hold (section 8.2.1): controls, space, uppercase, DEL and up,
# and a colon past a pseudo-header's first.
_NAME_FORBIDDEN: Final = frozenset(
    [chr(c) for c in range(0x21)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    + [chr(c) for c in range(0x7F, 0x100)] + [":"])


def request_problem(headers: Headers) -> str | None:
    """Why ``headers`` is not a well-formed request (RFC 9113 sections 8.2 and 8.3), None
    when it is: such a request is malformed, a stream error, and never served."""
    seen: set[str] = set()
    regular = False
    for name, value in headers:
        if not name:
            return "an empty field name"
        if name[0] == ":":
            if regular:
                return f"pseudo-header {name} after a regular field"
            if name not in _REQUEST_PSEUDO:
                return f"pseudo-header {name} is not a request's"
            if name in seen:
                return f"pseudo-header {name} twice"
            if not value:
                return f"pseudo-header {name} empty"
            seen.add(name)
        else:
            regular = True
            if name in _CONNECTION_SPECIFIC:
                return f"connection-specific field {name}"
            if name == "te" and value != "trailers":
                return "te other than trailers"
        problem = _field_problem(name[1:] if name[0] == ":" else name, value)
        if problem is not None:
            return problem
    for required in (":method", ":scheme", ":path"):
        if required not in seen:
            return f"no {required}"
    return None


def trailers_problem(headers: Headers) -> str | None:
    """Why a request's trailer section is malformed: it may carry no pseudo-header."""
    for name, value in headers:
        if not name or name[0] == ":":
            return "a pseudo-header in trailers"
        if name in _CONNECTION_SPECIFIC:
            return f"connection-specific field {name}"
        problem = _field_problem(name, value)
        if problem is not None:
            return problem
    return None


def _field_problem(name: str, value: str) -> str | None:
    for char in name:
        if char in _NAME_FORBIDDEN:
            return f"field name {name!r} holds {char!r}"
    if "\x00" in value or "\r" in value or "\n" in value:
        return f"field {name} holds NUL, CR or LF"
    if value and (value[0] in " \t" or value[-1] in " \t"):
        return f"field {name} begins or ends with white space"
    return None


def content_length(headers: Headers) -> int:
    """The request's ``content-length``, -1 when it has none; -2 when it is not a number."""
    for name, value in headers:
        if name == "content-length":
            return int(value) if value.isdigit() and len(value) < 19 else -2
    return -1


class Budget:
    """A leaky bucket of ``burst``: ``charge`` says whether the level is still within it."""

    def __init__(self, burst: int) -> None:
        self.burst = float(burst)
        self.rate = burst / 10.0  # drained a second
        self.level = 0.0
        self._since = 0.0

    def charge(self, now: float, amount: float = 1.0) -> bool:
        level = self.level - (now - self._since) * self.rate
        self.level = (level if level > 0.0 else 0.0) + amount
        self._since = now
        return self.level <= self.burst

    def credit(self, amount: float) -> None:
        level = self.level - amount
        self.level = level if level > 0.0 else 0.0


class PingPolicy:
    """gRPC's rule for a client's pings (its ``grpc.http2.*`` server arguments, tritonserver's
    ``--grpc-http2-*`` flags): a ping sooner than the allowed interval after the last one is a
    strike; the interval is two hours while no call is in flight unless pings without calls
    are permitted. Sending headers or data forgives every strike."""

    IDLE_INTERVAL: Final = 7200.0

    def __init__(self, permit_without_calls: bool = False, min_interval: float = 300.0,
                 max_strikes: int = 2) -> None:
        self.permit_without_calls = permit_without_calls
        self.min_interval = min_interval
        self.max_strikes = max_strikes
        self.strikes = 0
        self.last = -1e18

    def received(self, now: float, calls_in_flight: bool) -> bool:
        """A ping arrived at ``now``: False when it is one strike too many."""
        interval = (self.min_interval if calls_in_flight or self.permit_without_calls
                    else self.IDLE_INTERVAL)
        if now - self.last < interval:
            self.strikes += 1
        self.last = now
        return not self.max_strikes or self.strikes <= self.max_strikes

    def forgive(self) -> None:
        self.strikes = 0
        self.last = -1e18
