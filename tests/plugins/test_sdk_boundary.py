"""The plugin SDK is the boundary, both ways: a module under ``plugins/`` imports the kernel
only through ``inferd.kernel.sdk`` (and its modules); a module of the SDK imports nothing of
the kernel outside it (but the few names listed in ``REEXPORTED_FROM_THE_KERNEL``), and the
contracts it exports are defined in it. Every import statement is checked, those under
``if TYPE_CHECKING:`` and inside functions included."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
SDK_FOLDER = ROOT / "kernel" / "sdk"
SDK = "inferd.kernel.sdk"
SDK_MODULES = sorted(f"{SDK}.{path.stem}" if path.stem != "__init__" else SDK
                     for path in SDK_FOLDER.glob("*.py"))

REEXPORTED_FROM_THE_KERNEL: dict[str, dict[str, set[str]]] = {
    # The kernel names the SDK may take from outside kernel/sdk: none (the list is kept so
    # that the check below says what a new one would be).
}


def kernel_imports(path: Path) -> list[str]:
    """Every kernel module ``path`` imports other than the SDK, as ``line: module``."""
    return [f"{line}: {module}" for line, module, _ in _kernel_imports(path)]


def _kernel_imports(path: Path) -> list[tuple[int, str, set[str]]]:
    """Every kernel module ``path`` imports other than the SDK: line, module, names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            if node.module == "inferd.kernel":  # from inferd.kernel import log_context
                modules = [f"inferd.kernel.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            if (module == "inferd.kernel" or module.startswith("inferd.kernel.")) and not (
                    module == SDK or module.startswith(SDK + ".")):
                names = {alias.name for alias in node.names} if isinstance(
                    node, ast.ImportFrom) else set()
                found.append((node.lineno, module, names))
    return found


def test_plugins_import_the_kernel_only_through_the_sdk() -> None:
    modules = sorted(PLUGINS.rglob("*.py"))
    assert len(modules) > 40  # the walk found the plugins
    crossings = {str(path.relative_to(PLUGINS.parent)): imports for path in modules
                 if (imports := kernel_imports(path))}
    assert crossings == {}, "plugins importing kernel modules other than inferd.kernel.sdk: " + \
        "; ".join(f"{module} imports {', '.join(imports)}" for module, imports in crossings.items())


def test_the_check_catches_each_form_of_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import inferd.kernel.router\nfrom inferd.kernel import log_context\n"
                      "from inferd.kernel.sdk import hookimpl\n"
                      "def f():\n    from inferd.kernel.server import StartupFailed\n")
    assert kernel_imports(module) == ["1: inferd.kernel.router", "2: inferd.kernel.log_context",
                                      "5: inferd.kernel.server"]


def test_the_sdk_imports_the_kernel_only_inside_it() -> None:
    modules = sorted(SDK_FOLDER.glob("*.py"))
    assert len(modules) > 20  # the walk found the SDK
    crossings: dict[str, dict[str, set[str]]] = {}
    for path in modules:
        for _, module, names in _kernel_imports(path):
            crossings.setdefault(path.name, {}).setdefault(module, set()).update(names)
    assert crossings == REEXPORTED_FROM_THE_KERNEL, (
        "the SDK imports kernel modules outside kernel/sdk other than those listed (or a "
        "listed one is gone: shrink the list)")


@pytest.mark.parametrize("name", SDK_MODULES)
def test_every_name_the_sdk_exports_exists(name: str) -> None:
    sdk = importlib.import_module(name)
    missing = [export for export in sdk.__all__ if not hasattr(sdk, export)]
    assert missing == [], f"{name} lists names it does not have: {missing}"


@pytest.mark.parametrize("name", SDK_MODULES)
def test_the_contracts_the_sdk_exports_are_defined_in_it(name: str) -> None:
    """Every class, function and module an SDK module exports is defined under
    ``inferd.kernel.sdk`` or ``inferd.protocols``, but the listed re-exports: the SDK is
    where the contracts are, not a façade over the kernel."""
    reexported = {export for modules in REEXPORTED_FROM_THE_KERNEL.values()
                  for names in modules.values() for export in names}
    sdk = importlib.import_module(name)
    elsewhere = {}
    for export in sdk.__all__:
        value = getattr(sdk, export)
        if inspect.ismodule(value):
            defined = value.__name__
        elif inspect.isclass(value) or inspect.isfunction(value):
            defined = value.__module__
        else:
            continue  # a constant or a type alias: its module is where it is imported from
        if not defined.startswith((SDK, "inferd.protocols")) and export not in reexported:
            elsewhere[export] = defined
    assert elsewhere == {}, f"{name} exports names defined in the kernel: {elsewhere}"


def test_the_kernel_gives_frontends_what_the_sdk_says() -> None:
    """The kernel's data plane and settings are what the SDK's protocols describe (mypy
    checks their types; this checks the members exist at run time)."""
    from inferd.kernel.dataplane.data_plane import DataPlane
    from inferd.kernel.dataplane.streams import ResponseStream
    from inferd.kernel.settings import Settings
    from inferd.kernel.sdk import frontends

    for kernel_class, protocol in ((DataPlane, frontends.DataPlane),
                                   (ResponseStream, frontends.ResponseStream)):
        members = {name for name in vars(protocol) if not name.startswith("_")}
        members |= {"__aiter__", "__anext__"} & set(vars(protocol))
        missing = {member for member in members if not hasattr(kernel_class, member)
                   and member not in kernel_class.__init__.__code__.co_names}
        assert missing == set(), f"{kernel_class.__name__} lacks {missing}"
    settings = Settings()
    assert isinstance(settings.options, dict) and settings.exit_timeout_secs > 0
