"""The hook modules of the feature plugins import no client library: the server and every
executor process import them all at start-up, whatever is configured."""

from __future__ import annotations

import json
import subprocess
import sys

HOOK_MODULES = {
    "inferd.plugins.caches.redis": "redis",
    "inferd.plugins.tracing.opentelemetry": "opentelemetry",
    "inferd.plugins.storage.fsspec": "s3fs",
    "inferd.plugins.control_state.s3": "botocore",
    "inferd.plugins.cli": "typer",
}


def test_hook_modules_import_no_client_library() -> None:
    script = (
        "import json, sys\n"
        f"modules = {sorted(HOOK_MODULES)!r}\n"
        "for name in modules: __import__(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    imported = set(json.loads(done.stdout))
    assert imported.isdisjoint({*HOOK_MODULES.values(), "gcsfs", "adlfs", "rich", "grpc"}), \
        sorted(imported & {*HOOK_MODULES.values(), "gcsfs", "adlfs", "rich", "grpc"})


def test_control_policies_are_imported_only_when_their_flags_turn_them_on() -> None:
    """The on-demand and control-state hook modules declare flags and register a spec; what
    the control actor calls is imported only by ``open``, when a flag turns it on."""
    script = (
        "import json, sys\n"
        "import inferd.plugins.on_demand, inferd.plugins.control_state\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('inferd.plugins'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    assert json.loads(done.stdout) == ["inferd.plugins", "inferd.plugins.control_state",
                                       "inferd.plugins.on_demand"]
