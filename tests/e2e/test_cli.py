"""The ``inferd`` client commands run as a subprocess against one real server per module,
over each of the three protocols its ``--url`` chooses (tcp:// zmq, http://, grpc://): the
index as a table and as JSON, load with its progress line (READY, failed, timed out, config
and file overrides), unload, infer with JSON and .npy inputs, stats, and the exit codes a
script relies on (0 ok, 1 refused, 2 usage, 3 cannot connect)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tests.e2e.inferd_harness import InferdHarness, ServerHandle, free_port


INFERD = [sys.executable, "-m", "inferd.kernel.cli.main"]
PROTOCOLS = ("tcp", "http", "grpc")
CLI_TIMEOUT_SECS = 60
MLP_CATALOG = """description = "A small MLP"
task = "regression"
owner = "team-tabular"
[labels]
stage = "prod"
"""


def run(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*INFERD, *arguments], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_SECS)


@pytest.fixture(scope="module")
def server(module_inferd: InferdHarness) -> ServerHandle:
    h = module_inferd
    repository = h.repository("simple", "mlp", "identity_fp32", configs={
        "slow": h.testing_config("slow", "slow_load", load_delay_ms="1500"),
        # Loads held until their release file exists (30 s at most).
        **{f"slower_{protocol}": h.testing_config(
            f"slower_{protocol}", "slow_load", load_delay_ms="30000",
            release_file=str(h.folder / f"slower_{protocol}.release"))
           for protocol in PROTOCOLS},
        "broken": h.testing_config("broken", "fail_load", message="this model never loads"),
    })
    (repository / "mlp" / "catalog.toml").write_text(MLP_CATALOG, encoding="utf-8")
    return h.start(repository, "--model-control-mode", "explicit", "--load-model", "simple")


def url(server: ServerHandle, protocol: str) -> str:
    return {"tcp": server.url, "http": f"http://{server.http_url}",
            "grpc": f"grpc://{server.grpc_url}"}[protocol]


def table_rows(stdout: str) -> dict[str, list[str]]:
    """A table's rows by their first cell (the header row under its first header)."""
    rows = [line.split() for line in stdout.splitlines()]
    return {row[0]: row for row in rows if row and not set(row[0]) <= {"─"}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_models_load_and_unload(server: ServerHandle, protocol: str) -> None:
    address = url(server, protocol)
    loaded = run("load", "identity_fp32", "--url", address)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.startswith("loaded identity_fp32: READY (version 1) in "), loaded.stdout
    table = run("models", "--url", address)
    assert table.returncode == 0, table.stderr
    rows = table_rows(table.stdout)
    assert rows["MODEL"] == ["MODEL", "VERSION", "STATE", "REASON"]
    assert rows["mlp"] == ["mlp", "-", "-", "-"]
    assert rows["identity_fp32"] == ["identity_fp32", "1", "READY", "-"]
    assert rows["simple"] == ["simple", "1", "READY", "-"]
    unloaded = run("unload", "identity_fp32", "--url", address)
    assert unloaded.returncode == 0 and unloaded.stdout.strip() == "unloaded identity_fp32"
    after = table_rows(run("models", "--url", address).stdout)
    assert after["identity_fp32"] == ["identity_fp32", "1", "UNAVAILABLE", "unloaded"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_models_as_json_and_ready_only(server: ServerHandle, protocol: str) -> None:
    every = run("models", "--url", url(server, protocol), "--format", "json")
    assert every.returncode == 0, every.stderr
    names = [row["name"] for row in json.loads(every.stdout)]
    assert {"simple", "mlp", "identity_fp32", "slow", "broken"} <= set(names)
    ready = run("models", "--ready", "--url", url(server, protocol), "--format", "json")
    assert ready.returncode == 0, ready.stderr
    assert [row for row in json.loads(ready.stdout) if not row["name"].startswith("slower")] == [
        {"name": "simple", "version": "1", "state": "READY", "reason": ""}]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_load_shows_its_progress_until_ready(server: ServerHandle, protocol: str) -> None:
    started = time.monotonic()
    loaded = run("load", "slow", "--url", url(server, protocol))
    assert loaded.returncode == 0, loaded.stderr
    assert time.monotonic() - started >= 1.5  # it waited for the 1.5 s load to end
    assert "loading slow: LOADING (version 1) (" in loaded.stderr, loaded.stderr
    final = loaded.stdout.strip()
    assert final.startswith("loaded slow: READY (version 1) in ") and final.endswith(" s")
    assert float(final.split(" in ")[1].removesuffix(" s")) >= 1.5
    assert run("unload", "slow", "--url", url(server, protocol)).returncode == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_load_that_outlasts_its_timeout_exits_1(server: ServerHandle, protocol: str) -> None:
    try:  # the load is held until released: the command cannot have waited for its end
        late = run("load", f"slower_{protocol}", "--timeout", "0.5", "--url",
                   url(server, protocol))
    finally:
        (server.log_path.parents[1] / f"slower_{protocol}.release").touch()
    assert late.returncode == 1, late.stderr
    assert late.stderr.splitlines()[-1] == (
        f"error: the load of slower_{protocol} did not end within 0.5 s (now LOADING "
        "(version 1); the server goes on loading it)")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_failed_load_prints_the_reason_and_exits_1(server: ServerHandle,
                                                     protocol: str) -> None:
    failed = run("load", "nope", "--url", url(server, protocol))
    assert failed.returncode == 1
    assert failed.stderr.splitlines()[-1] == (
        "error: failed to load 'nope': model 'nope' is not in the model repository")
    broken = run("load", "broken", "--url", url(server, protocol), "--format", "json")
    assert broken.returncode == 1
    document = json.loads(broken.stdout)
    assert document["loaded"] is False
    assert "this model never loads" in document["error"]
    assert document["versions"][0]["state"] == "UNAVAILABLE"
    assert "this model never loads" in document["versions"][0]["reason"]
    assert broken.stderr.splitlines()[-1] == f"error: {document['error']}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_load_with_a_config_and_file_overrides(server: ServerHandle, protocol: str,
                                               tmp_path: Path) -> None:
    simple = Path(__file__).resolve().parents[2] / "model_repository" / "simple"
    pbtxt = (simple / "config.pbtxt").read_text().replace("max_batch_size: 8",
                                                          "max_batch_size: 4")
    config = tmp_path / "copied.pbtxt"
    config.write_text(pbtxt.replace('name: "simple"', f'name: "copied_{protocol}"'))
    name = f"copied_{protocol}"
    loaded = run("load", name, "--config", str(config), "--file",
                 f"1/model.onnx={simple / '1' / 'model.onnx'}", "--url", url(server, protocol))
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.startswith(f"loaded {name}: READY (version 1)")
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.get_model_config(name)["max_batch_size"] == 4
    as_json = tmp_path / "copied.json"
    as_json.write_text(json.dumps({**client.get_model_config(name), "max_batch_size": 2}))
    reloaded = run("load", name, "--config", str(as_json), "--file",
                   f"1/model.onnx={simple / '1' / 'model.onnx'}", "--url", url(server, protocol))
    assert reloaded.returncode == 0, reloaded.stderr
    assert client.get_model_config(name)["max_batch_size"] == 2
    assert run("unload", name, "--url", url(server, protocol)).returncode == 0


def test_bad_config_and_file_arguments_are_usage_errors(server: ServerHandle,
                                                        tmp_path: Path) -> None:
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("max_batch_size: x\n")
    for arguments, message in (
            (("--config", str(bad)), f"error: --config {bad}:1:17: "),
            (("--config", str(tmp_path / "absent.json")), "No such file or directory"),
            (("--file", "model.onnx"), "error: --file model.onnx: expected "
                                       "VERSION/NAME=LOCAL_PATH"),
            (("--file", "model.onnx=x"), "the target is <version>/<name>")):
        refused = run("load", "simple", *arguments, "--url", server.url)
        assert refused.returncode == 2, refused.stderr
        assert message in refused.stderr, refused.stderr


SIXTEEN = list(range(16))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_infer_with_json_and_npy_inputs(server: ServerHandle, protocol: str,
                                        tmp_path: Path) -> None:
    ones = tmp_path / "ones.npy"
    np.save(ones, np.ones((1, 16), dtype=np.int32))
    arguments = ("infer", "simple", "--input", f"INPUT0={json.dumps(SIXTEEN)}",
                 "--input", f"INPUT1=@{ones}", "--url", url(server, protocol))
    table = run(*arguments)
    assert table.returncode == 0, table.stderr
    rows = table_rows(table.stdout)
    assert rows["OUTPUT"] == ["OUTPUT", "DATATYPE", "SHAPE", "VALUES"]
    assert rows["OUTPUT0"][:4] == ["OUTPUT0", "INT32", "[1,", "16]"]
    assert " ".join(rows["OUTPUT0"][4:]) == "[1, 2, 3, 4, …, 13, 14, 15, 16]"
    assert " ".join(rows["OUTPUT1"][4:]) == "[-1, 0, 1, 2, …, 11, 12, 13, 14]"
    machine = run(*arguments, "--output", "OUTPUT1", "--version", "1", "--format", "json")
    assert machine.returncode == 0, machine.stderr
    document: dict[str, Any] = json.loads(machine.stdout)
    assert (document["model"], document["version"]) == ("simple", "1")
    assert document["outputs"] == [{"name": "OUTPUT1", "datatype": "INT32", "shape": [1, 16],
                                    "data": [[value - 1 for value in SIXTEEN]]}]
    absent = run(*arguments, "--version", "7")
    assert absent.returncode == 1 and absent.stderr.startswith("error: "), absent.stderr
    assert "7" in absent.stderr


def test_infer_errors_exit_1_for_the_server_and_2_for_bad_arguments(
        server: ServerHandle, tmp_path: Path) -> None:
    unknown = run("infer", "nope", "--input", "INPUT0=[1]", "--url", server.url)
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("error: ") and "nope" in unknown.stderr
    wrong_name = run("infer", "simple", "--input", f"WRONG={json.dumps(SIXTEEN)}",
                     "--url", server.url)
    assert wrong_name.returncode == 1, wrong_name.stderr
    assert "WRONG" in wrong_name.stderr
    for value, message in (
            ("INPUT0", "error: --input INPUT0: expected NAME=JSON or NAME=@file.npy"),
            ("INPUT0=[1,", "error: --input INPUT0=[1,: the value is not JSON"),
            ("INPUT0=[[1,2],[3]]", "error: --input INPUT0=[[1,2],[3]]: not a INT32 array"),
            (f"INPUT0=@{tmp_path / 'absent.npy'}", "No such file or directory")):
        bad = run("infer", "simple", "--input", value, "--url", server.url)
        assert bad.returncode == 2, bad.stderr
        assert message in bad.stderr, bad.stderr


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_stats_count_what_ran(server: ServerHandle, protocol: str) -> None:
    before = run("stats", "simple", "--url", url(server, protocol), "--format", "json")
    assert before.returncode == 0, before.stderr
    inputs = ("--input", f"INPUT0={json.dumps(SIXTEEN)}", "--input",
              f"INPUT1={json.dumps(SIXTEEN)}")
    assert run("infer", "simple", *inputs, "--url", url(server, protocol)).returncode == 0
    after = run("stats", "simple", "--url", url(server, protocol), "--format", "json")
    [then], [now] = json.loads(before.stdout), json.loads(after.stdout)
    assert (now["model"], now["version"]) == ("simple", "1")
    assert now["success"] == then["success"] + 1
    assert now["inference_count"] == then["inference_count"] + 1
    assert now["execution_count"] == then["execution_count"] + 1
    assert now["fail"] == then["fail"]
    # The averages are the server's statistics per success, in microseconds.
    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics(
        "simple")["model_stats"][0]["inference_stats"]
    assert now["avg_queue_us"] == stats["queue"]["ns"] / now["success"] / 1000 > 0
    compute_ns = sum(stats[f"compute_{phase}"]["ns"] for phase in ("input", "infer", "output"))
    assert now["avg_compute_us"] == compute_ns / now["success"] / 1000 > 0
    table = run("stats", "--url", url(server, protocol))
    assert table.returncode == 0, table.stderr
    rows = table_rows(table.stdout)
    assert rows["MODEL"] == ["MODEL", "VERSION", "SUCCESS", "FAIL", "INFERENCES",
                             "EXECUTIONS", "AVG", "QUEUE", "µs", "AVG", "COMPUTE", "µs"]
    assert rows["simple"][:3] == ["simple", "1", str(now["success"])]
    missing = run("stats", "nope", "--url", url(server, protocol))
    assert missing.returncode == 1 and missing.stderr.startswith("error: ")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unload_dependents_is_accepted(server: ServerHandle, protocol: str) -> None:
    assert run("load", "identity_fp32", "--url", url(server, protocol)).returncode == 0
    unloaded = run("unload", "identity_fp32", "--dependents", "--url", url(server, protocol),
                   "--format", "json")
    assert unloaded.returncode == 0, unloaded.stderr
    assert json.loads(unloaded.stdout) == {"model": "identity_fp32", "unloaded": True}
    rows = json.loads(run("models", "--url", server.url, "--format", "json").stdout)
    assert {"name": "identity_fp32", "version": "1", "state": "UNAVAILABLE",
            "reason": "unloaded"} in rows


@pytest.mark.parametrize("scheme", PROTOCOLS)
def test_no_server_exits_3_within_the_connect_timeout(scheme: str) -> None:
    started = time.monotonic()
    nothing = run("models", "--url", f"{scheme}://127.0.0.1:{free_port()}",
                  "--connect-timeout", "1")
    assert nothing.returncode == 3, nothing.stderr
    assert time.monotonic() - started < 20
    assert nothing.stderr.startswith("error: no inferd server answers at "), nothing.stderr


def test_usage_errors_exit_2() -> None:
    for arguments in (("models", "--url", "ftp://127.0.0.1:1"), ("models", "--url", "grpc://:8001"),
                      ("models", "--url", "http://127.0.0.1:99999"),
                      ("models", "--format", "xml"), ("load",), ("no-such-command",),
                      ("infer", "simple")):
        wrong = run(*arguments)
        assert wrong.returncode == 2, (arguments, wrong.stdout, wrong.stderr)
    assert "the scheme must be one of tcp://, http://, https://, grpc://" in run(
        "models", "--url", "ftp://127.0.0.1:1").stderr


def test_every_command_has_help_with_examples() -> None:
    top = run("--help")
    assert top.returncode == 0
    for command in ("models", "load", "unload", "infer", "stats", "catalog", "check", "serve"):
        assert command in top.stdout
    assert "Exit codes: 0 ok, 1 the server said no" in top.stdout
    for command in ("models", "load", "unload", "infer", "stats", "catalog", "check"):
        shown = run(command, "--help")
        assert shown.returncode == 0, shown.stderr
        assert "Examples" in shown.stdout and f"$ inferd {command}" in shown.stdout
        assert "Exit codes: 0 ok" in shown.stdout
    serve = run("serve", "--help")
    assert serve.returncode == 0
    assert serve.stdout.startswith("usage: inferd serve")
    for flag in ("--model-control-mode", "--exit-on-error", "--http-port", "--log-verbose"):
        assert flag in serve.stdout


@pytest.mark.parametrize("protocol", ("tcp", "http"))
def test_the_catalog_lists_models_loaded_or_not_and_filters_them(
        server: ServerHandle, protocol: str) -> None:
    listed = run("catalog", "--url", url(server, protocol))
    assert listed.returncode == 0, listed.stderr
    rows = table_rows(listed.stdout)
    assert rows["MODEL"][:4] == ["MODEL", "PLATFORM", "VERSIONS", "STATE"]
    assert rows["mlp"][:6] == ["mlp", "onnxruntime_onnx", "1", "NOT_LOADED", "regression",
                               "stage=prod"]
    assert rows["simple"][:4] == ["simple", "onnxruntime_onnx", "1", "READY"]
    for command in (("catalog",), ("models",)):
        kept = run(*command, "--label", "stage=prod", "--url", url(server, protocol),
                   "--format", "json")
        assert kept.returncode == 0, kept.stderr
        assert [entry["name"] for entry in json.loads(kept.stdout)] == ["mlp"]
    by_task = run("models", "--task", "regression", "--url", url(server, protocol))
    assert set(table_rows(by_task.stdout)) == {"MODEL", "mlp"}
    bad = run("catalog", "--label", "no-equals-sign", "--url", url(server, protocol))
    assert bad.returncode == 2 and "expected KEY=VALUE" in bad.stderr


@pytest.mark.parametrize("protocol", ("tcp", "http"))
def test_describe_shows_one_model_as_tables(server: ServerHandle, protocol: str) -> None:
    shown = run("models", "--describe", "mlp", "--url", url(server, protocol))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.split() == ["task", "regression"] for line in lines), shown.stdout
    assert any(line.split() == ["owner", "team-tabular"] for line in lines), shown.stdout
    assert ["input", "x", "FP32", "[-1,", "64]"] in [line.split() for line in lines], shown.stdout
    as_json = json.loads(run("models", "--describe", "mlp", "--url", url(server, protocol),
                             "--format", "json").stdout)
    assert as_json["metadata"]["description"] == "A small MLP"
    missing = run("models", "--describe", "nope", "--url", url(server, protocol))
    assert missing.returncode == 2 and "no model 'nope'" in missing.stderr


def test_the_catalog_is_not_served_over_grpc(server: ServerHandle) -> None:
    refused = run("catalog", "--url", url(server, "grpc"))
    assert refused.returncode == 2
    assert "the model catalog is not served over gRPC" in refused.stderr
