"""``inferd check``: each kind of problem on a broken repository, with its exact message and
place, the exit codes, the JSON shape and ``--show-config``, through the real CLI entry point
and the real backends' offline completion (onnxruntime opens the example's ONNX file; a
python model's ``auto_complete_config`` runs in a child process)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from inferd.kernel.cli.check.report import (
    CHECKED,
    COMPLETED,
    NEEDS_SERVER,
    NOT_NEEDED,
    CheckReport,
)
from inferd.kernel.cli.check.walk import check_repository
from inferd.kernel.cli.main import main
from inferd.kernel.runtime.plugin_manager import Plugins
from inferd.kernel.sdk.backends import BackendRegistry, BackendSpec

EXAMPLE = Path(__file__).resolve().parents[4] / "model_repository"
SIMPLE_ONNX = EXAMPLE / "simple" / "1" / "model.onnx"


def add(root: Path, name: str, config: str, versions: tuple[int, ...] = (1,)) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config, encoding="utf-8")
    for version in versions:
        (folder / str(version)).mkdir()
    return folder


def add_onnx(root: Path, name: str, config: str) -> Path:
    folder = add(root, name, config)
    shutil.copy(SIMPLE_ONNX, folder / "1" / "model.onnx")
    return folder


def echo_config(dtype: str = "TYPE_FP32", dims: str = "4", extra: str = "") -> str:
    return (f'backend: "inferd_testing"\nmax_batch_size: 0\n'
            f'input [{{name: "INPUT0" data_type: {dtype} dims: [{dims}]}}]\n'
            f'output [{{name: "OUTPUT0" data_type: {dtype} dims: [{dims}]}}]\n{extra}')


def ensemble(steps: list[tuple[str, int, str, str, str, str]], dtype: str = "TYPE_FP32") -> str:
    body = ",".join(
        f'{{model_name: "{model}" model_version: {version} input_map {{key: "{in_key}" '
        f'value: "{in_tensor}"}} output_map {{key: "{out_key}" value: "{out_tensor}"}}}}'
        for model, version, in_key, in_tensor, out_key, out_tensor in steps)
    return (f'platform: "ensemble"\nmax_batch_size: 0\n'
            f'input [{{name: "IN" data_type: {dtype} dims: [4]}}]\n'
            f'output [{{name: "OUT" data_type: {dtype} dims: [4]}}]\n'
            f"ensemble_scheduling {{ step [{body}] }}\n")


def check(root: Path, **settings: object) -> CheckReport:
    return check_repository([root], Plugins.load().backends(), **settings)  # type: ignore[arg-type]


def errors(report: CheckReport, name: str) -> list[str]:
    return next([f.located() for f in m.errors] for m in report.models if m.name == name)


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CheckReport]:
    """One repository with one model per kind of problem, checked once."""
    root = tmp_path_factory.mktemp("broken")
    add_onnx(root, "typo", 'name: "typo"\nplatform: "onnxruntime_onnx"\nmax_bach_size: 8\n')
    add(root, "no_file", 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n')
    add(root, "no_version", 'platform: "onnxruntime_onnx"\n', versions=())
    add(root, "negative", echo_config(extra="max_batch_size: -2\n").replace(
        "max_batch_size: 0\n", ""))
    add_onnx(root, "wrong_type", 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
             'input [{name: "INPUT0" data_type: TYPE_FP32 dims: [16]}]\n')
    add_onnx(root, "completed", 'platform: "onnxruntime_onnx"\n')
    add(root, "policy", echo_config(extra="version_policy { specific { versions: [1, 3] } }\n"),
        versions=(1, 2, 3))
    plan = add(root, "plan", 'platform: "tensorrt_plan"\n')
    (plan / "1" / "model.plan").write_bytes(b"not an engine")
    labelled = add(root, "labels", echo_config(dims="4").replace(
        'dims: [4]}]\n', 'dims: [4] label_filename: "labels.txt"}]\n', 2).replace(
        'label_filename: "labels.txt"}]\noutput', '}]\noutput'))
    assert (labelled / "config.pbtxt").read_text().count("label_filename") == 1
    bad_catalog = add(root, "bad_catalog", echo_config())
    (bad_catalog / "catalog.toml").write_text('task = "ocr"\n[labels]\nreplicas = 3\n')
    good_catalog = add(root, "good_catalog", echo_config())
    (good_catalog / "catalog.toml").write_text('task = "ocr"\n[labels]\nstage = "prod"\n')
    for name, dtype, dims in (("fp", "TYPE_FP32", "4"), ("i32", "TYPE_INT32", "4"),
                              ("wide", "TYPE_FP32", "8")):
        add(root, name, echo_config(dtype, dims))
    add(root, "good_ensemble", ensemble([("fp", -1, "INPUT0", "IN", "OUTPUT0", "mid"),
                                         ("fp", 1, "INPUT0", "mid", "OUTPUT0", "OUT")]))
    add(root, "unknown_step", ensemble([("nothere", -1, "INPUT0", "IN", "OUTPUT0", "OUT")]))
    add(root, "unmapped", ensemble([("fp", -1, "INPUT0", "nowhere", "OUTPUT0", "OUT")]))
    add(root, "type_mix", ensemble([("fp", -1, "INPUT0", "IN", "OUTPUT0", "mid"),
                                    ("i32", -1, "INPUT0", "mid", "OUTPUT0", "OUT")]))
    add(root, "shape_mix", ensemble([("fp", -1, "INPUT0", "IN", "OUTPUT0", "mid"),
                                     ("wide", -1, "INPUT0", "mid", "OUTPUT0", "OUT")]))
    add(root, "bad_key", ensemble([("fp", -1, "INPUTX", "IN", "OUTPUT0", "OUT")]))
    add(root, "bad_version", ensemble([("fp", 7, "INPUT0", "IN", "OUTPUT0", "OUT")]))
    add(root, "loop_a", ensemble([("loop_b", -1, "IN", "IN", "OUT", "OUT")]))
    add(root, "loop_b", ensemble([("loop_a", -1, "IN", "IN", "OUT", "OUT")]))
    add(root, "uses_broken", ensemble([("no_file", -1, "INPUT0", "IN", "OUTPUT0", "OUT")]))
    add(root, "warm_ensemble", ensemble([("fp", -1, "INPUT0", "IN", "OUTPUT0", "OUT")])
        + 'model_warmup [{ name: "open" batch_size: 1 inputs { key: "IN" value: '
          '{ data_type: TYPE_FP32 dims: [ -1 ] zero_data: true } } }]\n')
    return root, check(root)


@pytest.mark.parametrize(("model", "expected"), [
    ("typo", ['{root}/typo/config.pbtxt:3:1: no field named "max_bach_size"']),
    ("no_file", ["{root}/no_file/1: model 'no_file': version 1 has no model file "
                 "'1/model.onnx'"]),
    ("no_version", ["{root}/no_version/config.pbtxt: at least one version must be available "
                    "under the version policy of model 'no_version'"]),
    # A validation message's quoted field is placed on the one line that sets it.
    ("negative", ["{root}/negative/config.pbtxt:4:1: model 'negative': 'max_batch_size' must be "
                  ">= 0, got -2"]),
    ("wrong_type", ["{root}/wrong_type/1: model 'wrong_type', input 'INPUT0': the "
                    "configuration says TYPE_FP32 but the ONNX model has TYPE_INT32 "
                    "(tensor(int32))"]),
    ("labels", ["{root}/labels/config.pbtxt: unable to read label_filename of output 'OUTPUT0' "
                "'labels.txt': No such file or directory"]),
    ("bad_catalog", ["{root}/bad_catalog/catalog.toml:3:1: labels.replicas must be a string, "
                     "not an integer"]),
    ("unknown_step", ["{root}/unknown_step/config.pbtxt: ensemble 'unknown_step': step 0 "
                      "(model 'nothere') uses model 'nothere', which is neither in the model "
                      "repository nor loaded"]),
    ("unmapped", ["{root}/unmapped/config.pbtxt: ensemble 'unmapped': step 0 (model 'fp') "
                  "reads tensor 'nowhere', which is neither an ensemble input nor written by "
                  "any step"]),
    ("type_mix", ["{root}/type_mix/config.pbtxt: ensemble 'type_mix': tensor 'mid' is "
                  "TYPE_FP32 as output 'OUTPUT0' of step 0 ('fp') but input 'INPUT0' of step 1 "
                  "('i32') expects TYPE_INT32",
                  "{root}/type_mix/config.pbtxt: ensemble 'type_mix': tensor 'OUT' is "
                  "TYPE_INT32 as output 'OUTPUT0' of step 1 ('i32') but the ensemble's output "
                  "expects TYPE_FP32"]),
    ("shape_mix", ["{root}/shape_mix/config.pbtxt: ensemble 'shape_mix': tensor 'mid' has "
                   "shape [4] as output 'OUTPUT0' of step 0 ('fp') but input 'INPUT0' of step 1 "
                   "('wide') expects [8]",
                   "{root}/shape_mix/config.pbtxt: ensemble 'shape_mix': tensor 'OUT' has "
                   "shape [8] as output 'OUTPUT0' of step 1 ('wide') but the ensemble's output "
                   "expects [4]"]),
    ("bad_key", ["{root}/bad_key/config.pbtxt: ensemble 'bad_key': step 0 ('fp') maps tensor "
                 "'IN' to input 'INPUTX', which model 'fp' does not have (its inputs: "
                 "[INPUT0])"]),
    ("bad_version", ["{root}/bad_version/config.pbtxt: ensemble 'bad_version': step 0 ('fp') "
                     "uses version 7, which its version policy does not load (it loads: 1)"]),
    ("loop_a", ["{root}/loop_a/config.pbtxt: ensemble 'loop_a': its composing models form a "
                "cycle: 'loop_a' -> 'loop_b' -> 'loop_a'"]),
    ("loop_b", ["{root}/loop_b/config.pbtxt: ensemble 'loop_b': its composing models form a "
                "cycle: 'loop_b' -> 'loop_a' -> 'loop_b'"]),
    ("uses_broken", ["{root}/uses_broken/config.pbtxt: ensemble 'uses_broken': composing model "
                     "'no_file' would fail to load (see its errors)"]),
    ("warm_ensemble", ["{root}/warm_ensemble/config.pbtxt: warmup setting expects all "
                       "variable-size dimensions are specified for input 'IN'"]),
])
def test_each_problem_has_its_message_and_place(
    broken: tuple[Path, CheckReport], model: str, expected: list[str]
) -> None:
    root, report = broken
    assert errors(report, model) == [line.format(root=root) for line in expected]


@pytest.mark.parametrize("model", ["fp", "i32", "wide", "good_ensemble", "good_catalog",
                                   "completed", "policy", "plan"])
def test_sound_models_have_no_errors(broken: tuple[Path, CheckReport], model: str) -> None:
    assert errors(broken[1], model) == []


def test_versions_auto_complete_and_catalog_are_reported(broken: tuple[Path, CheckReport]
                                                         ) -> None:
    models = {model.name: model for model in broken[1].models}
    assert (models["policy"].versions_on_disk, models["policy"].versions) == ((1, 2, 3), (1, 3))
    assert models["completed"].completion == COMPLETED
    completed = models["completed"].config
    assert completed is not None and [i.name for i in completed.input] == ["INPUT0", "INPUT1"]
    assert completed.max_batch_size == 4  # batchable, so Triton's default-max-batch-size
    assert models["plan"].completion == NEEDS_SERVER
    assert models["fp"].completion == NOT_NEEDED
    catalog = models["good_catalog"].catalog
    assert catalog is not None and (catalog.task, catalog.labels) == ("ocr", (("stage", "prod"),))


def test_exit_codes_and_the_table(broken: tuple[Path, CheckReport], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    root = broken[0]
    assert main(["check", str(root)]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["MODEL", "VERSIONS", "STATE", "MESSAGE"]
    assert any(line.split()[:3] == ["policy", "1,3", "(on"] for line in lines), out
    assert any(line.split()[:3] == ["fp", "1", "ok"] for line in lines), out
    assert any(line.split()[:5] == ["typo", "-", "(on", "disk", "1)"] for line in lines), out
    assert any(line.split()[:4] == ["no_version", "-", "error", "at"] for line in lines), out
    assert f'error: {root}/typo/config.pbtxt:3:1: no field named "max_bach_size"' in lines
    clean = tmp_path / "clean"
    add(clean, "fp", echo_config())
    assert main(["check", str(clean)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 model(s), 0 error(s), 0 warning(s)"
    assert main(["check", str(tmp_path / "absent")]) == 2
    assert "the model repository does not exist" in capsys.readouterr().err
    assert main(["check", "--format", "yaml", str(clean)]) == 2


def test_a_model_in_two_roots_is_an_error_in_each(tmp_path: Path) -> None:
    for root in ("one", "two"):
        add(tmp_path / root, "twice", echo_config())
    add(tmp_path / "two", "once", echo_config())
    report = check_repository([tmp_path / "one", tmp_path / "two"], Plugins.load().backends())
    assert errors(report, "twice") == ["model appears in two or more repositories"]
    assert errors(report, "once") == []
    assert report.repositories == (str(tmp_path / "one"), str(tmp_path / "two"))


def test_warnings_leave_the_exit_code_zero(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    add(tmp_path, "fp", echo_config(extra="optimization { priority: PRIORITY_MAX }\n"))
    report = check(tmp_path)
    assert [finding.located() for finding in report.models[0].warnings] == [
        f"{tmp_path}/fp/config.pbtxt: model 'fp': optimization.priority is ignored: inferd "
        "does not prioritize models' executions"]
    assert main(["check", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 model(s), 0 error(s), 1 warning(s)" in out
    assert f"warning: {tmp_path}/fp/config.pbtxt: model 'fp': optimization.priority" in out


def test_json_shape(broken: tuple[Path, CheckReport], capsys: pytest.CaptureFixture[str]
                    ) -> None:
    root = broken[0]
    assert main(["check", "--format", "json", str(root)]) == 1
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {"format_version", "ok", "repositories", "error_count",
                             "warning_count", "errors", "models"}
    assert (document["format_version"], document["ok"], document["repositories"]) == (
        1, False, [str(root)])
    typo = next(m for m in document["models"] if m["name"] == "typo")
    assert typo == {
        "name": "typo", "path": str(root / "typo"), "state": "error", "backend": "",
        "platform": "", "versions_on_disk": [1], "versions": [], "auto_complete": NOT_NEEDED,
        "errors": [{"message": 'no field named "max_bach_size"',
                    "file": str(root / "typo" / "config.pbtxt"), "line": 3, "column": 1}],
        "warnings": [], "notes": [], "catalog": None,
    }
    good = next(m for m in document["models"] if m["name"] == "good_catalog")
    assert good["state"] == "ok" and good["catalog"] == {
        "description": "", "task": "ocr", "owner": "", "labels": {"stage": "prod"}, "links": {}}
    assert document["error_count"] == sum(len(m["errors"]) for m in document["models"])


def test_show_config_prints_what_the_server_would_use(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_onnx(tmp_path, "bare", 'platform: "onnxruntime_onnx"\n')
    assert main(["check", "--show-config", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    config = out.split("# bare: the config the server would use\n", 1)[1]
    assert 'name: "bare"' in config and 'platform: "onnxruntime_onnx"' in config
    assert 'backend: "onnxruntime"' in config
    assert 'input {\n  name: "INPUT0"\n  data_type: TYPE_INT32\n  dims: 16\n}' in config
    assert "max_batch_size: 4" in config  # batchable: --backend-config's default
    assert 'default_model_filename: "model.onnx"' in config
    assert main(["check", "--show-config", "--format", "json", str(tmp_path)]) == 0
    shown = json.loads(capsys.readouterr().out)["models"][0]["config"]
    assert 'name: "INPUT1"' in shown
    # Without auto-complete the bare config is refused, as serve would.
    assert main(["check", "--disable-auto-complete-config", str(tmp_path)]) == 1


PYTHON_COMPLETING = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        print("noise on stdout must not spoil the config")
        config.add_input({"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]})
        config.add_output({"name": "LENGTH", "data_type": "TYPE_INT32", "dims": [1]})
        return config

    def execute(self, requests):
        return []
'''

PYTHON_HANGING = '''
import time


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        time.sleep(60)
        return config

    def execute(self, requests):
        return []
'''


def test_python_auto_complete_runs_in_a_child_with_a_time_limit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Two repositories: the completing model under the default limit (a busy machine cannot
    # make it miss it), the one that never finishes under a short one.
    completing = add(tmp_path / "completes", "completing", 'backend: "python"\n')
    (completing / "1" / "model.py").write_text(PYTHON_COMPLETING, encoding="utf-8")
    hanging = add(tmp_path / "hangs", "hanging", 'backend: "python"\n')
    (hanging / "1" / "model.py").write_text(PYTHON_HANGING, encoding="utf-8")
    assert main(["check", "--format", "json", "--show-config", str(tmp_path / "completes")]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert (model["state"], model["auto_complete"]) == ("ok", COMPLETED)
    assert 'name: "TEXT"' in model["config"]
    assert 'name: "LENGTH"' in model["config"]
    assert main(["check", "--format", "json", "--completion-timeout-secs", "1",
                 str(tmp_path / "hangs")]) == 1
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert [e["message"] for e in model["errors"]] == [
        "model 'hanging': auto_complete_config did not finish within 1 s"]


def test_the_example_repository_is_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1].endswith(", 0 error(s), 0 warning(s)"), out


def test_a_completion_that_adds_nothing_says_it_only_checked(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--format", "json", str(EXAMPLE)]) == 0
    models = {m["name"]: m for m in json.loads(capsys.readouterr().out)["models"]}
    assert models["simple"]["auto_complete"] == CHECKED  # its config lists every tensor
    assert models["mlp"]["auto_complete"] == COMPLETED  # its config lists none


RAISING_COMPLETION = """
def complete(context):
    raise ValueError("the plugin cannot read this file")
"""


def test_a_plugins_completion_error_is_placed_at_the_line_that_raised_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "raising_completion.py").write_text(RAISING_COMPLETION, encoding="utf-8")
    monkeypatch.syspath_prepend(str(plugin))
    backends = BackendRegistry()
    backends.add(BackendSpec(name="raising", entry="raising_completion:Backend",
                             completion="raising_completion:complete"))
    add(tmp_path / "repository", "broken",
        'backend: "raising"\nmax_batch_size: 0\n'
        'input [{name: "X" data_type: TYPE_FP32 dims: [1]}]\n'
        'output [{name: "Y" data_type: TYPE_FP32 dims: [1]}]\n')
    report = check_repository([tmp_path / "repository"], backends)
    (finding,) = report.models[0].errors
    assert finding.located() == (f"{plugin / 'raising_completion.py'}:3:5: "
                                 "ValueError: the plugin cannot read this file")
