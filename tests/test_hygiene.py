"""The tests stay able to fail (issue 39, point 4), read from their source with ``ast``: no
test skips for want of a module through ``pytest.importorskip`` (``tests.services`` has
``import_or_missing``, which skips, except under ``CI``, where it fails), and no end-to-end
test sleeps and then asserts: one waits for an event it can observe (a metric, a log line, a
started batch) instead. A sleep counts as followed by an assert when one of the few statements
after it in its block asserts (``assert``, ``pytest.raises``) before any of them waits. The
sleeps before an assert that stay are listed below, each with its reason; an entry that no
longer matches one fails too, so the list only shrinks."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
E2E = TESTS / "e2e"
# The statements after a sleep that are read for an assert.
WINDOW = 3
# A call whose name holds one of these waits for something (``wait_for``, ``wait_until``,
# ``thread.join``, ``future.result``, ``asyncio.gather``): an assert after it is after a wait.
WAITING = ("wait", "until", "poll", "join", "result", "gather")

# The sleeps before an assert in tests/e2e that stay, one per (file, function), and why.
ALLOWED = {
    # Something must not happen: the sleep gives it the time it would take, and there is no
    # event to wait for when it rightly does not come.
    ("test_control_state.py", "test_a_running_replica_follows_the_record"):
        "four polls of the state file in which no replica may write it back",
    ("test_remote_repository.py",
     "test_storage_going_away_keeps_models_serving_and_its_return_is_picked_up"):
        "several polls of an unreachable repository in which nothing may be unloaded",
    # Time that must pass, not a bound on the server's speed: the server compares its clock
    # (this one) when the next request comes.
    ("test_sequence_batching.py", "test_an_idle_sequence_is_released"):
        "past max_sequence_idle_microseconds, checked when the next request is admitted",
    # A weak wait, not a flaky assert (each request takes DELAY_MS, so none can be done):
    # it should wait for the requests to start (the testing backend's started_file).
    ("test_shutdown.py", "scenario"):
        "gives the first requests time to reach their instances before SIGTERM",
}


def sources(folder: Path) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(folder.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def name(call: ast.Call) -> str:
    """The called function's own name: ``sleep`` for ``time.sleep(...)``."""
    return ast.unparse(call.func).rsplit(".", 1)[-1]


def calls(node: ast.AST) -> list[str]:
    """The names of the functions ``node`` calls."""
    return [name(call) for call in ast.walk(node) if isinstance(call, ast.Call)]


def is_sleep(statement: ast.stmt) -> bool:
    """``time.sleep(...)``, ``await asyncio.sleep(...)``, ``await anyio.sleep(...)``."""
    if not isinstance(statement, ast.Expr):
        return False
    value = statement.value.value if isinstance(statement.value, ast.Await) else statement.value
    return isinstance(value, ast.Call) and name(value) == "sleep"


def asserts(statement: ast.stmt) -> bool:
    """An ``assert``, or a ``with pytest.raises(...)``."""
    return isinstance(statement, ast.Assert) or (
        isinstance(statement, ast.With | ast.AsyncWith)
        and any("raises" in calls(item.context_expr) for item in statement.items))


def waits(statement: ast.stmt) -> bool:
    """A loop (a poll), a call named for waiting, or an await of anything but a sleep."""
    return isinstance(statement, ast.For | ast.AsyncFor | ast.While) or any(
        word in called for called in calls(statement) for word in WAITING) or any(
        isinstance(node, ast.Await)
        and not (isinstance(node.value, ast.Call) and name(node.value) == "sleep")
        for node in ast.walk(statement))


def importorskips(tree: ast.Module) -> list[int]:
    """The lines that call ``importorskip``, however it was imported."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and name(node) == "importorskip"]


def sleeps_then_asserts(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """The function and line of each sleep that an assert follows before any wait."""
    def visit(node: ast.AST, function: str) -> Iterator[tuple[str, int]]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for index, statement in enumerate(block):
                if not is_sleep(statement):
                    continue
                for after in block[index + 1:index + 1 + WINDOW]:
                    if asserts(after):
                        yield function, statement.lineno
                        break
                    if waits(after) or is_sleep(after):
                        break
        for child in ast.iter_child_nodes(node):
            yield from visit(child, function)

    yield from visit(tree, "")


def test_no_test_skips_for_want_of_a_module() -> None:
    found = [f"{path.relative_to(TESTS.parent)}:{line}"
             for path, tree in sources(TESTS) for line in importorskips(tree)]
    assert found == [], (
        "pytest.importorskip passes a missing install as green: use "
        f"tests.services.import_or_missing, which fails under CI: {found}")


def test_no_end_to_end_test_sleeps_then_asserts() -> None:
    found: dict[tuple[str, str], list[int]] = {}
    for path, tree in sources(E2E):
        for function, line in sleeps_then_asserts(tree):
            found.setdefault((path.name, function), []).append(line)
    # An allowed function keeps its one sleep: a second one there is new.
    new = sorted(f"tests/e2e/{file}:{line} (in {function})"
                 for (file, function), lines in found.items()
                 for line in lines[1 if (file, function) in ALLOWED else 0:])
    assert new == [], f"a sleep then an assert: wait for an observable event instead: {new}"
    stale = sorted(set(ALLOWED) - set(found))
    assert stale == [], f"allowed sleeps that are gone: take them off ALLOWED: {stale}"


def test_the_checks_see_what_they_look_for() -> None:
    """Each rule on a sample: flagged where it should be, and only there."""
    sample = ast.parse('''
import time, anyio, pytest
torch = pytest.importorskip("torch")
def test_flagged():
    time.sleep(1)
    value = read()
    assert value
async def test_flagged_too():
    await anyio.sleep(1)
    with pytest.raises(Error):
        read()
def test_waits_first():
    time.sleep(1)
    wait_for(ready, "ready")
    assert read()
def test_too_far():
    time.sleep(1)
    a = 1
    b = 2
    c = 3
    assert a + b + c
''')
    assert list(sleeps_then_asserts(sample)) == [
        ("test_flagged", 5), ("test_flagged_too", 9)]
    assert importorskips(sample) == [3]
