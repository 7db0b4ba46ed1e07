"""Hook module of the ``inferd`` command's client commands (models, catalog, load, unload,
label, infer, stats): registers each by import path, with its examples, and imports nothing else
(typer, rich and the clients load only when ``inferd`` runs one of them)."""

from __future__ import annotations

from inferd.kernel.sdk import CommandRegistry, CommandSpec, examples, hookimpl

_COMMANDS = "inferd.plugins.cli.commands"


@hookimpl
def inferd_register_commands(registry: CommandRegistry) -> None:
    for name, lines in (
        ("models", ("inferd models", "inferd models --ready --format json",
                    "inferd models --describe ocr",
                    "inferd models --label stage=prod --url http://models:8000",
                    "inferd models --url grpc://gpu-box:8001")),
        ("catalog", ("inferd catalog", "inferd catalog --task ocr",
                     "inferd catalog --label stage=prod --format json")),
        ("load", ("inferd load simple", "inferd load simple --config simple.json --timeout 120",
                  "inferd load mlp --config config.pbtxt --file 1/model.onnx=./mlp.onnx",
                  "inferd load simple --version 3")),
        ("unload", ("inferd unload simple", "inferd unload ensemble --dependents",
                    "inferd unload simple --version 2")),
        ("infer", ("inferd infer simple --input INPUT0='[[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,"
                   "16]]' --input INPUT1=@ones.npy",
                   "inferd infer simple --input INPUT0=@a.npy --input INPUT1=@b.npy --output "
                   "OUTPUT0 --format json")),
        ("stats", ("inferd stats", "inferd stats simple --format json")),
    ):
        registry.add(CommandSpec(name, f"{_COMMANDS}:{name}", examples(*lines)))
    registry.add(CommandSpec("label", "inferd.plugins.cli.labels:label", examples(
        "inferd label simple", "inferd label simple stable=4",
        "inferd label simple canary=5 --canary-percent 10 --url http://models:8000",
        "inferd label simple canary=none")))
