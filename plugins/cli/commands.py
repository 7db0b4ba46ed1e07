"""The ``inferd`` client commands: models, catalog, load, unload, infer, stats (registered by
``inferd.plugins.cli``; the kernel's typer app mounts them).

A command is a typed function: it takes the shared ``Url``/``Format``/``ConnectTimeout``
options, opens a ``Connection`` inside ``guarded()`` (which turns every failure into its
documented exit code and one ``error:`` line) and prints with ``render.show``. Exit codes: 0
ok, 1 the server said no (or a load failed or timed out), 2 usage, 3 cannot connect.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from inferd.kernel.sdk.commands import CANNOT_CONNECT, REFUSED, USAGE
from inferd.plugins.cli import catalog as cli_catalog
from inferd.plugins.cli import render
from inferd.plugins.cli.connection import (
    DEFAULT_URL,
    BadUrl,
    CannotConnect,
    IndexRow,
    Refused,
    open_connection,
    translated_errors,
)
from inferd.plugins.cli.inputs import (
    ArgumentProblem,
    config_override,
    input_tensors,
    override_files,
)
from inferd.plugins.cli.loading import states, watch_load
from inferd.plugins.cli.render import Column


class Format(str, enum.Enum):
    table = "table"
    json = "json"


Url = Annotated[str, typer.Option(
    "--url", envvar="INFERD_URL", show_envvar=True,
    help="the server and its protocol: tcp://HOST:PORT (inferd's zmq client), "
         "http://HOST:PORT or https:// (KServe HTTP), grpc://HOST:PORT (KServe gRPC); "
         "without a port the server's default (8003, 8000, 8001)")]
Fmt = Annotated[Format, typer.Option("--format", help="table for people, json for scripts")]
ConnectTimeout = Annotated[float, typer.Option(
    "--connect-timeout", min=0.1, help="seconds to wait for the server to answer at all")]


@contextlib.contextmanager
def guarded(url: str) -> Iterator[None]:
    """Run a command body, ending it with the exit code its failure calls for."""
    try:
        with translated_errors(url):
            yield
    except (ArgumentProblem, BadUrl) as problem:
        render.error(str(problem))
        raise typer.Exit(USAGE) from None
    except Refused as refusal:
        render.error(str(refusal))
        raise typer.Exit(REFUSED) from None
    except CannotConnect as failure:
        render.error(str(failure))
        raise typer.Exit(CANNOT_CONNECT) from None


INDEX_COLUMNS = (Column("name", "MODEL"), Column("version", "VERSION"),
                 Column("state", "STATE"), Column("reason", "REASON"))


BUDGET_COLUMNS = (Column("memory", "MEMORY", numeric=True), Column("last_used", "LAST USED"))


def _row(row: IndexRow) -> dict[str, str]:
    record = {"name": row.name, "version": row.version, "state": row.state,
              "reason": row.reason}
    if row.memory_bytes or row.last_used_ms:  # a server with --model-memory-budget
        record["memory"] = _bytes(row.memory_bytes) if row.memory_bytes else ""
        record["last_used"] = (time.strftime("%Y-%m-%d %H:%M:%S",
                                             time.localtime(row.last_used_ms / 1000))
                               if row.last_used_ms else "never")
    return record


def _bytes(count: int) -> str:
    """``16 GiB``, ``1.5 MiB``, ``512 B``: as the server's budget messages word sizes."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{count} B"


Labels = Annotated[list[str] | None, typer.Option(
    "--label", metavar="KEY=VALUE", help="only models whose catalog has this label (repeatable)")]
Task = Annotated[str, typer.Option("--task", help="only models of this catalog task")]


def models(
    ready: Annotated[bool, typer.Option("--ready", help="only READY versions")] = False,
    describe: Annotated[str, typer.Option(
        "--describe", metavar="MODEL",
        help="one model from the catalog: its fields, metadata and tensors")] = "",
    label: Labels = None, task: Task = "",
    url: Url = DEFAULT_URL, fmt: Fmt = Format.table, connect_timeout: ConnectTimeout = 5.0,
) -> None:
    """The repository index: every model, its versions and their state. With --describe,
    --label or --task: the model catalog instead (served over tcp:// and http://)."""
    if describe or label or task:
        _show_catalog(url, fmt, connect_timeout, label or [], task, describe)
        return
    with guarded(url):
        connection = open_connection(url, 60.0, connect_timeout)
        rows = connection.index(ready)
        connection.close()
        records = [_row(row) for row in rows]
        budgeted = any("memory" in record for record in records)
        render.show(fmt.value, (*INDEX_COLUMNS, *BUDGET_COLUMNS) if budgeted else INDEX_COLUMNS,
                    records)


def catalog(
    label: Labels = None, task: Task = "",
    url: Url = DEFAULT_URL, fmt: Fmt = Format.table, connect_timeout: ConnectTimeout = 5.0,
) -> None:
    """The model catalog: every model of the repository, loaded or not, with its platform,
    versions on disk, state and catalog.toml metadata (served over tcp:// and http://)."""
    _show_catalog(url, fmt, connect_timeout, label or [], task, "")


def _show_catalog(url: str, fmt: Format, connect_timeout: float, labels: Sequence[str],
                  task: str, describe: str) -> None:
    with guarded(url):
        filters = cli_catalog.label_filters(labels)
        connection = open_connection(url, 60.0, connect_timeout)
        entries = connection.catalog(filters, task)
        connection.close()
        if not describe:
            render.show(fmt.value, cli_catalog.LIST_COLUMNS,
                        [cli_catalog.list_record(entry) for entry in entries], entries)
            return
        entry = cli_catalog.described(entries, describe)
        if fmt == Format.json:
            render.show(fmt.value, (), [], entry)
            return
        render.show(fmt.value, cli_catalog.FIELD_COLUMNS, cli_catalog.field_records(entry))
        render.show(fmt.value, cli_catalog.TENSOR_COLUMNS, cli_catalog.tensor_records(entry))


def load(
    model: Annotated[str, typer.Argument(help="the model to load (or reload)")],
    config: Annotated[Path | None, typer.Option(
        "--config", help="a config override: a .json ModelConfig, or config.pbtxt text")] = None,
    files: Annotated[list[str] | None, typer.Option(
        "--file", metavar="VERSION/NAME=LOCAL",
        help="a file of the model's folder taken from a local file (repeatable; needs "
             "--config)")] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=0.1, help="seconds to wait for the load to end")] = 600.0,
    versions: Annotated[list[int] | None, typer.Option(
        "--version", min=1, metavar="N",
        help="load only this version, leaving the others as they are (repeatable; an "
             "inferd extension)")] = None,
    url: Url = DEFAULT_URL, fmt: Fmt = Format.table, connect_timeout: ConnectTimeout = 5.0,
) -> None:
    """Load or reload a model (or only some of its versions), showing its state until it is
    READY or failed."""
    with guarded(url):
        config_json = config_override(str(config)) if config is not None else None
        overrides = override_files(files or ())
        watcher = open_connection(url, 60.0, connect_timeout)
        outcome = watch_load(watcher, url, model, config_json, overrides, timeout,
                             connect_timeout, sorted(set(versions or ())))
        watcher.close()
        document = {"model": model, "loaded": outcome.error is None,
                    "elapsed_s": round(outcome.elapsed, 3), "error": outcome.error,
                    "versions": [_row(row) for row in outcome.rows]}
        if fmt is Format.json:
            render.show("json", (), (), document)
        elif outcome.error is None:
            print(f"loaded {model}: {states(outcome.rows)} in {outcome.elapsed:.2f} s")
        if outcome.error is not None:
            render.error(outcome.error)
            raise typer.Exit(REFUSED)


def unload(
    model: Annotated[str, typer.Argument(help="the model to unload")],
    dependents: Annotated[bool, typer.Option(
        "--dependents", help="also unload the models it depends on (an ensemble's steps)")
    ] = False,
    versions: Annotated[list[int] | None, typer.Option(
        "--version", min=1, metavar="N",
        help="unload only this version, the others serving on (repeatable; an inferd "
             "extension)")] = None,
    url: Url = DEFAULT_URL, fmt: Fmt = Format.table, connect_timeout: ConnectTimeout = 5.0,
) -> None:
    """Unload a model (every version of it, or those given with --version)."""
    chosen = sorted(set(versions or ()))
    with guarded(url):
        connection = open_connection(url, 600.0, connect_timeout)
        connection.unload(model, dependents, chosen)
        connection.close()
        which = f" version {', '.join(map(str, chosen))}" if chosen else ""
        if fmt is Format.json:
            render.show("json", (), (), {"model": model, "unloaded": True,
                                         **({"versions": chosen} if chosen else {})})
        else:
            print(f"unloaded {model}{which}")


OUTPUT_COLUMNS = (Column("name", "OUTPUT"), Column("datatype", "DATATYPE"),
                  Column("shape", "SHAPE"), Column("values", "VALUES"))


def infer(
    model: Annotated[str, typer.Argument(help="the model to run")],
    inputs: Annotated[list[str], typer.Option(
        "--input", "-i", metavar="NAME=JSON|@FILE.npy",
        help="an input: a JSON array (the model's datatype; a missing batch dimension is "
             "added) or a .npy file (sent as it is); repeatable")],
    outputs: Annotated[list[str] | None, typer.Option(
        "--output", "-o", metavar="NAME", help="an output to return (default: all)")] = None,
    version: Annotated[str, typer.Option("--version", help="a version (default: the "
                                                           "model's policy)")] = "",
    url: Url = DEFAULT_URL, fmt: Fmt = Format.table, connect_timeout: ConnectTimeout = 5.0,
) -> None:
    """Run one inference and print its outputs."""
    with guarded(url):
        connection = open_connection(url, 600.0, connect_timeout)
        tensors = input_tensors(inputs, connection.inputs(model, version))
        answer = connection.infer(model, tensors, outputs or (), version)
        connection.close()
        records = [{"name": o.name, "datatype": o.datatype, "shape": list(o.shape),
                    "values": render.values(o.data), "data": o.data} for o in answer.outputs]
        if fmt is Format.json:
            for record in records:
                del record["values"]
            render.show("json", (), (), {"model": answer.model, "version": answer.version,
                                         "outputs": records})
        else:
            render.show("table", OUTPUT_COLUMNS, records)


STATS_COLUMNS = (
    Column("model", "MODEL"), Column("version", "VERSION"),
    Column("success", "SUCCESS", numeric=True), Column("fail", "FAIL", numeric=True),
    Column("inference_count", "INFERENCES", numeric=True),
    Column("execution_count", "EXECUTIONS", numeric=True),
    Column("avg_queue_us", "AVG QUEUE µs", numeric=True),
    Column("avg_compute_us", "AVG COMPUTE µs", numeric=True),
)


def stats_record(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A KServe ``model_stats`` entry as the table's row: averages per successful request."""
    inference = entry.get("inference_stats", {})

    def phase(name: str, field: str = "ns") -> int:
        return int(inference.get(name, {}).get(field, 0))

    success = phase("success", "count")
    compute = phase("compute_input") + phase("compute_infer") + phase("compute_output")
    return {
        "model": entry.get("name", ""), "version": entry.get("version", ""),
        "success": success, "fail": phase("fail", "count"),
        "inference_count": int(entry.get("inference_count", 0)),
        "execution_count": int(entry.get("execution_count", 0)),
        "avg_queue_us": phase("queue") / success / 1000 if success else 0.0,
        "avg_compute_us": compute / success / 1000 if success else 0.0,
    }


def stats(
    model: Annotated[str, typer.Argument(help="one model (default: every model)")] = "",
    version: Annotated[str, typer.Option("--version", help="one version")] = "",
    url: Url = DEFAULT_URL, fmt: Fmt = Format.table, connect_timeout: ConnectTimeout = 5.0,
) -> None:
    """Inference statistics per model version: counts and average times."""
    with guarded(url):
        connection = open_connection(url, 60.0, connect_timeout)
        entries = connection.statistics(model, version)
        connection.close()
        render.show(fmt.value, STATS_COLUMNS, [stats_record(entry) for entry in entries])
