"""setup.py's compiled build, run for real in a copy of the tree that compiles one small module
(``INFERD_COMPILE_ONLY``, at ``-O0``): a build killed while the C compiler runs leaves the
edited source running and says why, and the next build compiles the edit; a build that mypyc
or the C compiler refuses still installs, and the server it leaves warns at start-up. Each
copy imports as ``inferd`` from its own folder, with the editable install's finder removed."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.inferd_harness import free_port

ROOT = Path(__file__).resolve().parents[1]
MODULE = "kernel/actors/scheduler/response_order.py"
BUILD_ENV = {"INFERD_COMPILE_ONLY": MODULE, "INFERD_COMPILE_OPT": "0", "PYTHONUNBUFFERED": "1"}
BUILD = [sys.executable, "setup.py", "build_ext", "--inplace"]
# The line distutils prints as it starts the C compiler on one file.
COMPILER_STARTS = re.compile(r" -c \S+\.c -o \S+\.o")
UNFINISHED = "a build started and did not finish; rebuild with make setup"
REBUILD_HINT = "make setup, or python setup.py build_ext --inplace, shows the build's output"
STOP_SECS = 30

# Runs the copy at argv[1] as inferd (the installed one hidden): then the probe, or the CLI.
IMPORT_THE_COPY = """
import json, sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
sys.path_importer_cache.clear()
sys.path.insert(0, sys.argv.pop(1))
"""
PROBE = IMPORT_THE_COPY + """
from inferd.protocols import build
from inferd.kernel.actors.scheduler import response_order
print(json.dumps({"describe": build.describe(), "fell_back": build.fell_back(),
                  "file": response_order.__file__,
                  "edited": getattr(response_order, "EDITED", False)}))
"""
SERVE = IMPORT_THE_COPY + """
from inferd.kernel.cli.main import main
sys.exit(main())
"""


def _copy_tree(target: Path) -> Path:
    """What setup.py reads (itself, pyproject.toml, kernel/, protocols/), no build in it, and
    ``site/inferd`` naming the copy's packages (and the tree's plugins) for imports."""
    shutil.copy(ROOT / "setup.py", target)
    shutil.copy(ROOT / "pyproject.toml", target)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "compiled.json*")
    for package in ("kernel", "protocols"):
        shutil.copytree(ROOT / package, target / package, ignore=ignore)
        (target / "site" / "inferd").mkdir(parents=True, exist_ok=True)
        (target / "site" / "inferd" / package).symlink_to(target / package)
    (target / "site" / "inferd" / "plugins").symlink_to(ROOT / "plugins")
    return target


def _build(tree: Path, **env: str) -> str:
    result = subprocess.run(BUILD, cwd=tree, env={**os.environ, **BUILD_ENV, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert result.returncode == 0, result.stdout
    return result.stdout


def _probe(tree: Path) -> dict[str, object]:
    output = subprocess.run([sys.executable, "-c", PROBE, str(tree / "site")], check=True,
                            capture_output=True, text=True, cwd=tree).stdout
    seen: dict[str, object] = json.loads(output)
    return seen


def _manifest(tree: Path) -> dict[str, object]:
    manifest: dict[str, object] = json.loads((tree / "protocols" / "compiled.json").read_text())
    return manifest


def _append(source: Path, text: str) -> None:
    source.write_text(source.read_text() + text)


def _kill_once_the_compiler_runs(tree: Path) -> list[str]:
    """Start a build and SIGKILL it (and the compiler, in its process group) as soon as it
    starts the C compiler; the lines it printed."""
    build = subprocess.Popen(BUILD, cwd=tree, env={**os.environ, **BUILD_ENV},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    assert build.stdout is not None
    lines = []
    try:
        for line in build.stdout:
            lines.append(line)
            if COMPILER_STARTS.search(line):
                break
        else:
            pytest.fail("the build never started the C compiler:\n" + "".join(lines))
    finally:
        os.killpg(build.pid, signal.SIGKILL)
        build.wait(STOP_SECS)
        build.stdout.close()
    assert build.returncode == -signal.SIGKILL, "".join(lines)  # killed, not finished
    return lines


@pytest.mark.timeout(600)  # real builds: seconds each, more on a loaded machine
def test_a_build_killed_mid_compile_leaves_the_edited_source_running(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    _build(tree)
    before = _probe(tree)
    assert (before["describe"], before["fell_back"], before["edited"]) == (
        "compiled with mypyc (1 modules)", False, False)
    extension = Path(str(before["file"]))
    assert extension.name.endswith(".so")
    _append(tree / MODULE, "\nEDITED = True\n")

    lines = _kill_once_the_compiler_runs(tree)

    assert "building 'inferd.protocols.compiled__mypyc' extension\n" in lines
    assert extension.is_file()  # the previous build's, beside the source edited since
    assert (_manifest(tree)["compiled"], _manifest(tree)["reason"]) == (False, UNFINISHED)
    assert _probe(tree) == {
        "describe": f"pure Python ({UNFINISHED})", "fell_back": True,
        "file": str(tree / "site" / "inferd" / MODULE), "edited": True,
    }

    # make setup's step does not take the killed build for an up-to-date one.
    assert "up to date" not in _build(tree)
    after = _probe(tree)
    assert (after["describe"], after["edited"]) == ("compiled with mypyc (1 modules)", True)


@pytest.mark.timeout(600)  # a real build and a server start
@pytest.mark.parametrize("failure", ["mypyc", "C compiler"])
def test_a_failed_build_installs_and_the_server_warns_at_start(
        tmp_path: Path, failure: str) -> None:
    tree = _copy_tree(tmp_path)
    env = {}
    if failure == "mypyc":
        _append(tree / MODULE, '\nNOT_AN_INT: int = "a type error"\n')
    else:
        env["CC"] = "false"  # distutils runs $CC: a compiler that fails every file

    output = _build(tree, **env)

    manifest = _manifest(tree)
    reason = str(manifest["reason"])
    assert manifest["compiled"] is False
    assert reason.startswith(
        "mypyc build failed: " if failure == "mypyc" else "the C build failed ("), output
    if failure == "mypyc":  # mypy's own first error, naming the file and line
        assert f"{MODULE}:" in reason and "error: Incompatible types" in reason, reason
    assert reason.endswith(REBUILD_HINT), reason
    assert "the request path runs as pure Python" in output
    assert _start_up_line(tree) == ("WARNING", f"request path: pure Python ({reason})")


def _start_up_line(tree: Path) -> tuple[str, str]:
    """The level and message of the server's ``request path`` line (the server then stops)."""
    repository = tree / "empty_repository"
    repository.mkdir()
    command = [sys.executable, "-c", SERVE, str(tree / "site"), "serve", "--log-format", "json",
               "--model-repository", str(repository)]
    for protocol in ("zmq", "http", "grpc", "metrics"):
        command += [f"--{protocol}-address", "127.0.0.1", f"--{protocol}-port", str(free_port())]
    server = subprocess.Popen(command, cwd=tree, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert server.stdout is not None
    lines = []
    try:
        for line in server.stdout:
            lines.append(line)
            if '"request path: ' in line:
                record = json.loads(line)
                return record["level"], record["message"]
        pytest.fail("the server never logged its request path:\n" + "".join(lines))
    finally:
        server.terminate()
        try:
            server.wait(STOP_SECS)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(STOP_SECS)
        server.stdout.close()
