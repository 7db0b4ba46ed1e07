"""The plugin SDK is the boundary: a module under ``plugins/`` imports the kernel only through
``inferd.kernel.sdk`` (and its ``backends``/``frontends`` modules). Every import statement is
checked, those under ``if TYPE_CHECKING:`` and inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
SDK = "inferd.kernel.sdk"


def kernel_imports(path: Path) -> list[str]:
    """Every kernel module ``path`` imports other than the SDK, as ``line: module``."""
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
                found.append(f"{node.lineno}: {module}")
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


def test_every_name_the_sdk_exports_exists() -> None:
    import importlib

    for name in (SDK, f"{SDK}.backends", f"{SDK}.frontends"):
        sdk = importlib.import_module(name)
        missing = [export for export in sdk.__all__ if not hasattr(sdk, export)]
        assert missing == [], f"{name} lists names it does not have: {missing}"
