"""Fuzz inferd's HTTP API from its OpenAPI description (``protocols/kserve_http/openapi.json``) with
schemathesis, against a live server, and print the cases tried and failures found.

Every operation of the description gets up to ``--max-examples`` generated requests that fit
the description (positive) and as many that do not (negative: wrong types, missing fields,
malformed bodies and headers); path parameters are half generated, half the served models'
names, so requests reach real models. Each response must not be a 5xx, must have a documented
status and content type, and its body must validate against the documented schema (errors are
``{"error": ...}``); a request that gets no response (the server died or dropped it) is a
failure too, and the server must still be live at the end.

    python -m bench.reliability.fuzz_http                      # starts its own server (EXPLICIT mode)
    python -m bench.reliability.fuzz_http --url http://127.0.0.1:8000 --max-examples 20 --time-budget 60

Exit code 0 when no failure was found, 1 otherwise. The bounded CI run is
``tests/e2e/test_openapi.py``, which runs this script with small numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.failures import ServerError
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

ROOT = Path(__file__).resolve().parents[2]
DESCRIPTION = ROOT / "protocols" / "kserve_http" / "openapi.json"
# Documented answers that are no fault of the server: unsupported (CUDA shared memory) and
# unavailable (a model not ready, a poll outside POLL mode, a queue full).
EXPECTED_5XX = frozenset({501, 503})


def not_a_server_fault(ctx: Any, response: Any, case: Any) -> None:
    """schemathesis's ``not_a_server_error``, but with 501 and 503 allowed."""
    if response.status_code >= 500 and response.status_code not in EXPECTED_5XX:
        raise ServerError(operation=case.operation.label, status_code=response.status_code)


CHECKS = [not_a_server_fault, status_code_conformance, content_type_conformance,
          response_schema_conformance]
REQUEST_TIMEOUT_SECS = 30.0
SHOWN_FAILURES = 10


class _OutOfTime(Exception):
    """The time budget ran out: stop generating."""


@dataclass
class Tally:
    cases: int = 0
    negative: int = 0  # of the cases, those off the description
    failures: list[str] = field(default_factory=list)


@dataclass
class Run:
    """Every operation's tally, and whether the time budget cut the run short."""

    tallies: dict[str, Tally] = field(default_factory=dict)
    out_of_time: bool = False


def fuzz(base_url: str, max_examples: int, time_budget: float, models: tuple[str, ...],
         seed: int | None) -> Run:
    schema = schemathesis.openapi.from_path(str(DESCRIPTION))
    session = requests.Session()
    deadline = time.monotonic() + time_budget
    result = Run()
    tallies = result.tallies
    operations = [result.ok() for result in schema.get_all_operations()]
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for operation in operations:
            label = f"{operation.method.upper()} {operation.path}"
            tally = tallies.setdefault(label, Tally())
            parameter_names = {parameter.name for parameter in operation.path_parameters}
            strategies = [operation.as_strategy(mode)]
            if "model" in parameter_names:
                strategies += [operation.as_strategy(mode, path_parameters={"model": model})
                               for model in models]
            run = _runner(st.one_of(strategies), base_url, session, tally, deadline,
                          max_examples, seed, negative=mode == GenerationMode.NEGATIVE)
            try:
                run()
            except _OutOfTime:
                result.out_of_time = True
                return result
            except Unsatisfiable:
                continue  # nothing to negate: an operation without parameters or body
    return result


def _runner(strategy: st.SearchStrategy[Any], base_url: str, session: requests.Session,
            tally: Tally, deadline: float, max_examples: int,
            seed: int | None, negative: bool) -> Callable[[], None]:
    @settings(max_examples=max_examples, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate], derandomize=seed is not None,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              verbosity=Verbosity.quiet)
    @given(case=strategy)
    def run(case: Any) -> None:
        if time.monotonic() > deadline:
            raise _OutOfTime
        tally.cases += 1
        tally.negative += negative
        try:
            response = case.call(base_url=base_url, session=session,
                                 timeout=REQUEST_TIMEOUT_SECS)
        except requests.RequestException as error:
            tally.failures.append(f"no response: {error}\n  {case.as_curl_command()}")
            return
        try:
            case.validate_response(response, checks=CHECKS)
        except (Exception, BaseExceptionGroup) as error:  # noqa: BLE001 - counted, not raised
            tally.failures.append(f"{type(error).__name__}: {error}\n"
                                  f"  {case.as_curl_command()}")

    return run


def is_live(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/v2/health/live", timeout=10) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def report(run: Run, elapsed: float, live: bool) -> tuple[int, int]:
    tallies = run.tallies
    cases = sum(t.cases for t in tallies.values())
    failures = sum(len(t.failures) for t in tallies.values())
    width = max(len(label) for label in tallies)
    print(f"{'operation':<{width}}  {'cases':>6}  {'failures':>8}")
    for label, tally in tallies.items():
        print(f"{label:<{width}}  {tally.cases:>6}  {len(tally.failures):>8}")
    print(f"{'total':<{width}}  {cases:>6}  {failures:>8}")
    shown = [f for t in tallies.values() for f in t.failures][:SHOWN_FAILURES]
    for failure in shown:
        print("\nFAILURE " + failure)
    print(f"\nschemathesis: {cases} cases tried, {failures} failures found, "
          f"{len(tallies)} operations, {elapsed:.0f} s; server live after: {live}")
    if run.out_of_time:
        print("the time budget ran out before every operation and mode was tried")
    print(json.dumps({"cases": cases, "failures": failures, "live": live,
                      "negative": sum(t.negative for t in tallies.values()),
                      "operations": len(tallies), "out_of_time": run.out_of_time}))
    return cases, failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server's HTTP base URL (default: start one)")
    parser.add_argument("--max-examples", type=int, default=100,
                        help="generated requests per operation and mode (default 100)")
    parser.add_argument("--time-budget", type=float, default=900.0,
                        help="stop generating after this many seconds (default 900)")
    parser.add_argument("--models", default="simple,identity_fp32,add_sub,add_then_identity",
                        help="model names used as path parameters, comma-separated")
    parser.add_argument("--seed", type=int, default=None, help="derandomize hypothesis")
    arguments = parser.parse_args()
    models = tuple(m for m in arguments.models.split(",") if m)
    if arguments.url:
        return _run(arguments.url.rstrip("/"), arguments, models)
    from bench.common import serving
    from bench.reliability import repository as reliability_repository

    with serving.temporary_folder("inferd-fuzz-") as folder:
        repository = reliability_repository.build(folder)
        flags = ["--model-control-mode=explicit", "--log-verbose=0"]
        flags += [f"--load-model={name}" for name in reliability_repository.MODELS]
        with serving.running(repository, *flags, log=folder / "server.log",
                             model=reliability_repository.ENSEMBLE, via="http") as server:
            code = _run(f"http://{server.address('http')}", arguments, models)
            if server.process.poll() is not None:
                print(f"the server exited with {server.process.returncode}:\n"
                      f"{server.log_tail()}")
                return 1
            return code


def _run(base_url: str, arguments: argparse.Namespace, models: tuple[str, ...]) -> int:
    started = time.monotonic()
    run = fuzz(base_url, arguments.max_examples, arguments.time_budget, models, arguments.seed)
    _, failures = report(run, time.monotonic() - started, live := is_live(base_url))
    return 0 if failures == 0 and live else 1


if __name__ == "__main__":
    sys.exit(main())
