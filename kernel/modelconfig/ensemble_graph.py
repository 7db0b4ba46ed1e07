"""The rules of an ensemble's dataflow graph (``ensemble_scheduling``), before any step runs.

Owns the ensemble checks Triton makes at load: every step names a valid model and maps inputs
and outputs, every tensor a step reads is an ensemble input or written by exactly one step, no
step writes an ensemble input, the steps form no cycle, every ensemble output is written and
every ensemble input read (``check_ensemble_graph``, which needs nothing outside the config), and
every composing model known (``validate_ensemble``). Every failure is an ``InvalidArgument``
naming the ensemble and the offending step or tensor. It must not change the config or touch
the file system; the rules of a config as a whole are ``inferd.kernel.modelconfig.validation``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.names import model_name_problem, quoted


def validate_ensemble(config: ModelConfig, known_models: Callable[[str], bool]) -> None:
    """Check an ensemble's dataflow graph and that every composing model is known
    (``known_models(name)`` is true when the repository has it or it is loaded)."""
    check_ensemble_graph(config)
    for index, step in enumerate(config.ensemble_scheduling.step):
        if step.model_name == config.name:
            _fail_ensemble(config, f"{_step_label(index, step)} uses the ensemble itself")
        if not known_models(step.model_name):
            _fail_ensemble(
                config,
                f"{_step_label(index, step)} uses model '{step.model_name}', which is neither "
                "in the model repository nor loaded",
            )



def check_ensemble_graph(config: ModelConfig) -> None:
    """The structural ensemble checks, which need nothing outside the config."""
    steps = list(config.ensemble_scheduling.step)
    if not steps:
        _fail_ensemble(config, "'ensemble_scheduling' must have at least one 'step'")
    ensemble_inputs = {tensor.name for tensor in config.input}
    writer: dict[str, int] = {}
    for index, step in enumerate(steps):
        label = _step_label(index, step)
        if not step.model_name:
            _fail_ensemble(config, f"step {index} must specify 'model_name'")
        if model_name_problem(step.model_name):
            _fail_ensemble(config, f"step {index}: {quoted(step.model_name)} is not a valid "
                           f"model name: {model_name_problem(step.model_name)}")
        if not step.input_map:
            _fail_ensemble(config, f"{label} must specify 'input_map'")
        if not step.output_map:
            _fail_ensemble(config, f"{label} must specify 'output_map'")
        if step.model_version < -1:
            _fail_ensemble(config, f"{label} has 'model_version' {step.model_version}; use -1 "
                           "for the latest version or a version number >= 0")
        for tensor in step.output_map.values():
            if tensor in ensemble_inputs:
                _fail_ensemble(config, f"{label} writes tensor '{tensor}', which is an "
                               "ensemble input")
            if tensor in writer:
                _fail_ensemble(config, f"tensor '{tensor}' is written by both "
                               f"{_step_label(writer[tensor], steps[writer[tensor]])} and {label}")
            writer[tensor] = index
    read: set[str] = set()
    for index, step in enumerate(steps):
        for tensor in step.input_map.values():
            read.add(tensor)
            if tensor not in ensemble_inputs and tensor not in writer:
                _fail_ensemble(config, f"{_step_label(index, step)} reads tensor '{tensor}', "
                               "which is neither an ensemble input nor written by any step")
    _check_no_cycle(config, steps, writer)
    for output in config.output:
        if output.name not in writer:
            _fail_ensemble(config, f"ensemble output '{output.name}' is not written by any step")
    for name in sorted(ensemble_inputs - read):
        _fail_ensemble(config, f"ensemble input '{name}' is not read by any step")


def _check_no_cycle(config: ModelConfig, steps: list[Any], writer: dict[str, int]) -> None:
    waits_on = [
        {writer[tensor] for tensor in step.input_map.values() if tensor in writer}
        for step in steps
    ]
    done: set[int] = set()
    progressed = True
    while progressed:
        progressed = False
        for index, needs in enumerate(waits_on):
            if index not in done and needs <= done:
                done.add(index)
                progressed = True
    stuck = [_step_label(index, steps[index]) for index in range(len(steps)) if index not in done]
    if stuck:
        _fail_ensemble(config, f"steps form a cycle, each waiting for a tensor written by "
                       f"another: {', '.join(stuck)}")


def _step_label(index: int, step: Any) -> str:
    return f"step {index} (model '{step.model_name}')"


def _fail_ensemble(config: ModelConfig, detail: str) -> NoReturn:
    raise InvalidArgument(f"ensemble '{config.name}': {detail}")
