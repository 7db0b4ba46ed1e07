"""Which build of the request path runs (inferd.protocols.build): what ``describe`` says is what
is imported, ``INFERD_COMPILE=0`` runs the sources, and a compiled module whose source was
edited after the build never shadows it (the whole compiled set then runs as source), nor does
an extension file other than the one the build made. Under CI the compiled build is what must
run, since that is what users install: the tests that need it fail there without it, and skip
elsewhere. (tests/test_setup_build.py runs setup.py itself.)"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from inferd.protocols import build

ROOT = Path(__file__).resolve().parents[2]

# Prints what runs, from a copy of the packages at argv[1] (the installed ones are hidden).
PROBE = """
import importlib.abc, json, sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
sys.path_importer_cache.clear()
sys.path.insert(0, sys.argv[1])
from inferd.protocols import build, tensors
from inferd.protocols.wire import codec as wire
print(json.dumps({"describe": build.describe(), "fell_back": build.fell_back(),
                  "tensors": tensors.__file__, "wire": wire.__file__,
                  "edited": getattr(tensors, "EDITED", False)}))
"""


def _compiled_files() -> list[str]:
    return [importlib.import_module(name).__file__ or "" for name in build.install().compiled]


def _needs_the_compiled_build() -> None:
    """Fail under CI unless the compiled build runs; elsewhere skip what only it can show."""
    if build.install().compiled:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the compiled build; this runs {build.describe()}")
    pytest.skip(f"no compiled build here: {build.describe()}")


def _setup_pys_modules() -> set[str]:
    """The modules of setup.py's ``COMPILED`` list, read without running setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    listed = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                  and any(isinstance(target, ast.Name) and target.id == "COMPILED"
                          for target in node.targets))
    return {"inferd." + path.removesuffix(".py").replace("/", ".")
            for path in ast.literal_eval(listed)}


def test_describe_names_the_build_that_runs() -> None:
    running = build.install()
    from inferd.protocols.wire import codec as wire

    if running.compiled:
        assert build.describe() == f"compiled with mypyc ({len(running.compiled)} modules)"
        assert "inferd.protocols.wire.codec" in running.compiled
        assert all(not path.endswith(".py") for path in _compiled_files())
    else:
        assert build.describe() == f"pure Python ({running.reason})"
        assert wire.__file__ is not None and wire.__file__.endswith(".py")


@pytest.mark.skipif(not os.environ.get("CI"), reason="outside CI a pure-Python run is allowed")
def test_ci_runs_the_compiled_build() -> None:
    assert build.describe().startswith("compiled with mypyc"), build.describe()
    assert not build.fell_back()
    # All of setup.py's list, each module loaded from its extension.
    assert set(build.install().compiled) == _setup_pys_modules()
    assert all(not path.endswith(".py") for path in _compiled_files()), _compiled_files()


def _probe(packages: Path, **env: str) -> dict[str, object]:
    output = subprocess.run(
        [sys.executable, "-c", PROBE, str(packages)], check=True, capture_output=True,
        text=True, env={**os.environ, **env}, cwd=packages,
    ).stdout
    result: dict[str, object] = json.loads(output)
    return result


def _copy_packages(target: Path) -> Path:
    """The installed protocols and kernel packages, compiled extensions and manifest
    included, as ``target/inferd/...``."""
    for name in ("protocols", "kernel"):
        source = Path(importlib.import_module(f"inferd.{name}").__file__ or "").parent
        shutil.copytree(source, target / "inferd" / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_inferd_compile_0_runs_the_sources(tmp_path: Path) -> None:
    packages = _copy_packages(tmp_path)
    seen = _probe(packages, INFERD_COMPILE="0")
    assert seen["describe"] == "pure Python (INFERD_COMPILE=0)"
    assert seen["fell_back"] is False  # asked for: the start-up line is no warning
    assert str(seen["wire"]).endswith("codec.py")


def test_a_build_made_with_inferd_compile_0_is_no_fallback(tmp_path: Path) -> None:
    packages = _copy_packages(tmp_path)
    # What setup.py writes when INFERD_COMPILE=0 is set at the build.
    (packages / "inferd" / "protocols" / "compiled.json").write_text(json.dumps({
        "compiled": False, "reason": "built with INFERD_COMPILE=0", "source_requested": True,
        "modules": {}, "extensions": {}}))
    seen = _probe(packages, INFERD_COMPILE="1")
    assert (seen["describe"], seen["fell_back"]) == (
        "pure Python (built with INFERD_COMPILE=0)", False)


def test_an_edited_source_is_not_shadowed_by_its_compiled_module(tmp_path: Path) -> None:
    packages = _copy_packages(tmp_path)
    env = {"INFERD_COMPILE": "1"}
    before = _probe(packages, **env)
    assert before["describe"] == build.describe()  # the copy runs what the install runs
    assert before["edited"] is False
    source = packages / "inferd" / "protocols" / "tensors.py"
    source.write_text(source.read_text() + "\nEDITED = True\n")

    after = _probe(packages, **env)

    assert after["edited"] is True
    assert str(after["tensors"]).endswith("tensors.py")
    # The rest of the compiled group runs as source too: its modules call each other natively.
    assert str(after["wire"]).endswith("codec.py")
    _needs_the_compiled_build()
    assert after["describe"] == (
        "pure Python (inferd.protocols.tensors changed since it was compiled; "
        "rebuild with make setup)"
    )
    assert after["fell_back"] is True


def test_an_extension_the_build_did_not_make_never_loads(tmp_path: Path) -> None:
    _needs_the_compiled_build()
    packages = _copy_packages(tmp_path)
    protocols = packages / "inferd" / "protocols"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    # What a build killed while copying leaves: one extension file not the build's own.
    shutil.copy(protocols / "wire" / f"codec{suffix}", protocols / f"tensors{suffix}")

    seen = _probe(packages, INFERD_COMPILE="1")

    assert seen["describe"] == (
        "pure Python (inferd.protocols.tensors's extension is not the one its build made; "
        "rebuild with make setup)"
    )
    assert str(seen["tensors"]).endswith("tensors.py")
    assert str(seen["wire"]).endswith("codec.py")


def test_an_extension_module_no_build_lists_never_loads(tmp_path: Path) -> None:
    packages = _copy_packages(tmp_path)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    # What an earlier build with a longer list leaves; importing it would fail outright.
    (packages / "inferd" / "protocols" / f"names{suffix}").write_bytes(b"not a library")
    probe = PROBE.replace("print(", "from inferd.protocols import names\nprint(names.__file__, ")
    output = subprocess.run([sys.executable, "-c", probe, str(packages)], check=True,
                            capture_output=True, text=True, cwd=packages).stdout
    assert output.split()[0].endswith("names.py")


def test_a_missing_manifest_runs_the_sources(tmp_path: Path) -> None:
    packages = _copy_packages(tmp_path)
    (packages / "inferd" / "protocols" / "compiled.json").unlink(missing_ok=True)
    seen = _probe(packages)
    assert seen["describe"] == "pure Python (not built: no compiled.json)"
    assert seen["fell_back"] is True
    assert str(seen["wire"]).endswith("codec.py")


def test_the_manifest_lists_setup_pys_modules_and_their_extensions() -> None:
    _needs_the_compiled_build()
    manifest = json.loads(build.MANIFEST.read_text())
    assert set(manifest["modules"]) == _setup_pys_modules()
    assert set(manifest["extensions"]) == {*manifest["modules"], build.GROUP_LIBRARY}
    for module, digest in manifest["modules"].items():
        assert build.source_hash(build.source_of(module)) == digest, module
    for module, digest in manifest["extensions"].items():
        extension = build.extension_of(module)
        assert extension is not None and build.source_hash(extension) == digest, module


def test_a_stale_extension_named_as_a_package_never_loads(tmp_path: Path) -> None:
    # A module that became a package of its name (protocols/http2/connection.py -> protocols/http2/)
    # leaves, in a tree built before, an extension module of the old name beside the folder
    # (removed by the next build, but a build that cannot run leaves it): the package loads.
    packages = _copy_packages(tmp_path)
    protocols = packages / "inferd" / "protocols"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    names = sorted(init.parent.name for init in protocols.glob("*/__init__.py"))
    assert names
    for name in names:
        (protocols / f"{name}{suffix}").write_bytes(b"not a library")
    imports = "".join(f"import inferd.protocols.{name}\n" for name in names)
    files = ", ".join(f"inferd.protocols.{name}.__file__" for name in names)
    probe = PROBE.replace("print(", f"{imports}print({files}, ", 1)
    output = subprocess.run([sys.executable, "-c", probe, str(packages)], check=True,
                            capture_output=True, text=True, cwd=packages).stdout
    loaded = output.split()[:len(names)]
    assert [Path(file).relative_to(protocols).as_posix() for file in loaded] == [
        f"{name}/__init__.py" for name in names]
