"""Plugins end to end: a third-party backend distribution, built and installed from
``tests/plugins/thirdparty_backend``, serves a model; the deny-list switches it off; and a
framework that cannot be imported makes only its own models UNAVAILABLE, with the reason."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

THIRD_PARTY = Path(__file__).resolve().parents[1] / "plugins" / "thirdparty_backend"

REVERSE_CONFIG = """
name: "rev"
backend: "reverse"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }]
"""


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The third-party distribution, built and installed into a folder of its own."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--no-build-isolation", "--target", str(target), str(THIRD_PARTY)],
        check=True, timeout=180, capture_output=True,
    )
    assert (target / "inferd_reverse" / "backend.py").exists()
    assert any(target.glob("inferd_reverse-1.0.0.dist-info/entry_points.txt"))
    return target


def test_a_pip_installed_backend_serves_a_model(inferd: Any, installed_plugin: Path) -> None:
    repository = inferd.repository(configs={"rev": REVERSE_CONFIG})
    server = inferd.start(repository, env={"PYTHONPATH": str(installed_plugin)})
    with server.client() as client:
        assert [(e.name, e.state) for e in client.index()] == [("rev", "READY")]
        result = client.infer("rev", {"INPUT0": np.array([1, 2, 3, 4], dtype=np.int32)})
        assert result.as_numpy("OUTPUT0").tolist() == [4, 3, 2, 1]


@pytest.fixture(scope="module")
def author_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A plugin author's setup: a venv that sees this one's packages (inferd included),
    with the third-party backend installed from its project folder by ``pip install -e``
    (a setuptools editable install: an import hook, not a ``sys.path`` entry). The project
    folder is named like its package, ``inferd_reverse``. Returns (python, that folder)."""
    root = tmp_path_factory.mktemp("author")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=120)
    (site_packages,) = venv.glob("lib/python3*/site-packages")
    ours = next(path for path in sys.path if path.endswith("site-packages"))
    (site_packages / "inferd_parent.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    project = root / "inferd_reverse"
    shutil.copytree(THIRD_PARTY, project, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "-e", str(project)],
                   check=True, timeout=180, capture_output=True)
    return python, project


def test_a_project_folder_named_like_the_plugin_does_not_shadow_it(
    inferd: Any, author_venv: tuple[Path, Path]
) -> None:
    """The author serves from the folder that holds their project folder: every process of
    the server, executors included, imports the installed plugin, not that folder as an
    empty namespace package (executors did: ``python -m`` put the working directory first,
    and the model was 'not installed in this server')."""
    python, project = author_venv
    shutil.copytree(project, inferd.folder / "logs" / project.name)  # the working directory
    repository = inferd.repository(configs={"rev": REVERSE_CONFIG})
    server = inferd.start(repository, python=str(python))
    with server.client() as client:
        entries = {e.name: e for e in client.index()}
        assert entries["rev"].state == "READY", entries["rev"].reason
        result = client.infer("rev", {"INPUT0": np.array([1, 2, 3, 4], dtype=np.int32)})
        assert result.as_numpy("OUTPUT0").tolist() == [4, 3, 2, 1]
    assert "implements no inferd hook" not in server.log()


def test_the_example_packages_own_test_passes_with_the_sdk_server(
    author_venv: tuple[Path, Path]
) -> None:
    """What a plugin author runs: their package's test, which starts a real server through
    ``inferd.kernel.sdk.testing.serve`` and calls its model (pytest of this venv)."""
    python, project = author_venv
    finished = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         str(project / "tests")],
        cwd=project.parent, capture_output=True, text=True, timeout=300, check=False)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "1 passed" in finished.stdout


def test_a_denied_plugin_leaves_its_models_unavailable(inferd: Any, installed_plugin: Path) -> None:
    repository = inferd.repository("simple", configs={"rev": REVERSE_CONFIG})
    server = inferd.start(
        repository, "--exit-on-error=false",
        env={"PYTHONPATH": str(installed_plugin), "INFERD_DISABLE_PLUGINS": "reverse"},
    )
    with server.client() as client:
        entries = {e.name: e for e in client.index()}
        assert entries["simple"].state == "READY"
        assert entries["rev"].state == "UNAVAILABLE"
        assert "reverse" in entries["rev"].reason


def test_a_framework_missing_from_the_machine_fails_only_its_models(
    inferd: Any, tmp_path: Path
) -> None:
    # A package named onnxruntime that refuses to import stands for a machine without it.
    blocker = tmp_path / "no-onnxruntime" / "onnxruntime"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        'raise ImportError("No module named \'onnxruntime\' (hidden by the test)")\n'
    )
    echo = inferd.testing_config("echo", "echo")
    repository = inferd.repository("simple", configs={"echo": echo})
    server = inferd.start(
        repository, "--exit-on-error=false", env={"PYTHONPATH": str(blocker.parent)}
    )
    with server.client() as client:
        entries = {e.name: e for e in client.index()}
        assert entries["simple"].state == "UNAVAILABLE"
        assert "onnxruntime is not installed" in entries["simple"].reason
        assert entries["echo"].state == "READY"
        data = np.arange(4, dtype=np.float32)
        assert client.infer("echo", {"INPUT0": data}).as_numpy("OUTPUT0").tolist() == [0, 1, 2, 3]


# ------------------------------------------------------------------------ a third-party cache

CACHE_PLUGIN = '''
"""A third-party response cache: entries in a dict, each call noted in a file."""
from inferd.kernel.sdk import CacheCounters, CacheRegistry, CacheSpec, hookimpl, text

NAME = {name!r}


class NotingCache:
    name = NAME

    def __init__(self, notes):
        self.counters = CacheCounters()
        self.entries = {{}}
        self.notes = notes

    def _note(self, what):
        with open(self.notes, "a") as file:
            file.write(what + "\\n")

    def describe(self):
        return "a third-party cache noting to " + self.notes

    async def lookup(self, key):
        self._note("lookup")
        return self.entries.get(key)

    async def insert(self, key, entry):
        self._note("insert")
        self.entries.setdefault(key, entry)
        return True

    def metrics(self):
        return self.counters.samples()

    async def close(self):
        self._note("close")


def configure(values, environ):
    return values["notes"]


async def open_cache(notes):
    return NotingCache(notes)


@hookimpl
def inferd_register_caches(registry: CacheRegistry) -> None:
    registry.add(CacheSpec(NAME, {{"notes": text}}, configure, open_cache))
'''


def cache_plugin(folder: Path, name: str) -> Path:
    """A distribution installed as pip installs one: its module and a ``*.dist-info`` whose
    entry point importlib.metadata finds on ``PYTHONPATH``."""
    site = folder / "site"
    (site / "inferd_noting_cache").mkdir(parents=True)
    (site / "inferd_noting_cache" / "__init__.py").write_text(CACHE_PLUGIN.format(name=name))
    info = site / "inferd_noting_cache-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: inferd-noting-cache\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text("[inferd]\nnoting_cache = inferd_noting_cache\n")
    return site


def cached_echo(inferd: Any) -> Path:
    echo = inferd.testing_config("echo", "echo") + "response_cache { enable: true }\n"
    return inferd.repository(configs={"echo": echo})


def infer_twice(server: Any) -> None:
    data = np.arange(4, dtype=np.float32)
    with server.client() as client:
        for _ in range(2):
            answer = client.infer("echo", {"INPUT0": data}).as_numpy("OUTPUT0")
            assert answer.tolist() == [0, 1, 2, 3]


def cache_counts(server: Any) -> tuple[int, int]:
    import tritonclient.http as httpclient

    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics(
        "echo")["model_stats"][0]["inference_stats"]
    return stats["cache_hit"]["count"], stats["cache_miss"]["count"]


def test_a_third_party_cache_answers_repeated_requests(inferd: Any, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    server = inferd.start(cached_echo(inferd), f"--cache-config=noting,notes={notes}",
                          env={"PYTHONPATH": str(cache_plugin(tmp_path, "noting"))})
    infer_twice(server)
    assert cache_counts(server) == (1, 1)
    assert notes.read_text().split() == ["lookup", "insert", "lookup"]
    assert "response cache: a third-party cache noting to" in server.log()


def test_a_third_party_cache_replaces_a_built_in_one(inferd: Any, tmp_path: Path) -> None:
    # Without the built-in local cache, "local" is the third-party one, with its own settings.
    notes = tmp_path / "notes.txt"
    server = inferd.start(cached_echo(inferd), f"--cache-config=local,notes={notes}",
                          env={"PYTHONPATH": str(cache_plugin(tmp_path, "local")),
                               "INFERD_DISABLE_PLUGINS": "local_cache"})
    infer_twice(server)
    assert cache_counts(server) == (1, 1)
    assert notes.read_text().split() == ["lookup", "insert", "lookup"]


def test_an_unknown_cache_names_those_there_are(inferd: Any) -> None:
    server = inferd.launch(cached_echo(inferd), "--cache-config=memcached,size=10")
    assert server.wait_exit(60) == 1
    assert "unknown cache 'memcached' (inferd has the caches local, redis)" in server.log()


# ------------------------------------------------------------------------ the checksum agent


def checksummed(inferd: Any, name: str, digest: str) -> str:
    return inferd.testing_config(name, "echo") + (
        'model_repository_agents { agents [{ name: "checksum", parameters '
        f'{{ key: "MD5:1/weights.bin" value: "{digest}" }} }}] }}\n')


def test_the_checksum_agent_loads_good_files_and_refuses_bad_ones(inferd: Any) -> None:
    import hashlib

    weights = b"the model's weights"
    good = hashlib.md5(weights).hexdigest()
    bad = hashlib.md5(b"other weights").hexdigest()
    repository = inferd.repository(configs={"good": checksummed(inferd, "good", good),
                                            "bad": checksummed(inferd, "bad", bad),
                                            "plain": inferd.testing_config("plain", "echo")})
    for name in ("good", "bad"):
        (repository / name / "1" / "weights.bin").write_bytes(weights)
    server = inferd.start(repository, "--exit-on-error=false")
    with server.client() as client:
        entries = {e.name: e for e in client.index()}
        assert (entries["good"].state, entries["plain"].state) == ("READY", "READY")
        assert entries["bad"].state == "UNAVAILABLE"
        assert entries["bad"].reason == (
            f"model 'bad': repository agent 'checksum': Mismatched MD5 hash for file "
            f"1/weights.bin, expect: {bad}, got: {good}")
        data = np.arange(4, dtype=np.float32)
        for name in ("good", "plain"):
            assert client.infer(name, {"INPUT0": data}).as_numpy("OUTPUT0").tolist() == \
                [0, 1, 2, 3]
