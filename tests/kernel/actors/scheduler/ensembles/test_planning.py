"""Ensemble planning: steps, the tensors they read and write, what waits for what, and one
request's progress through the plan (parallel branches, pruning, optional inputs). No I/O."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.ensembles.planning import Dataflow, EnsemblePlan, EnsembleStep
from inferd.protocols.errors import InvalidArgument

# IN -> pre -> (left, right in parallel) -> post -> OUT; right also writes SIDE.
DIAMOND = """
name: "diamond"
platform: "ensemble"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "SIDE" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "pre" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "a" } },
  { model_name: "left" model_version: 2
    input_map { key: "INPUT0" value: "a" } output_map { key: "OUTPUT0" value: "b" } },
  { model_name: "right" model_version: -1
    input_map { key: "INPUT0" value: "a" }
    output_map [ { key: "OUTPUT0" value: "c" }, { key: "OUTPUT1" value: "SIDE" } ] },
  { model_name: "post" model_version: -1
    input_map [ { key: "INPUT0" value: "b" }, { key: "INPUT1" value: "c" } ]
    output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""


def config(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


@pytest.fixture
def diamond() -> EnsemblePlan:
    return EnsemblePlan.from_config(config(DIAMOND))


def names(steps: list[EnsembleStep]) -> list[str]:
    return [step.model for step in steps]


def test_a_plan_lists_steps_with_what_they_read_and_write(diamond: EnsemblePlan) -> None:
    assert diamond.name == "diamond"
    assert (diamond.inputs, diamond.outputs) == (("IN",), ("OUT", "SIDE"))
    right = diamond.steps[2]
    assert (right.index, right.model, right.version) == (2, "right", -1)
    assert right.inputs == (("INPUT0", "a"),)
    assert right.outputs == (("OUTPUT0", "c"), ("OUTPUT1", "SIDE"))
    assert (right.reads, right.writes) == (frozenset({"a"}), frozenset({"c", "SIDE"}))
    assert diamond.steps[1].version == 2
    assert diamond.waits_on == (frozenset(), frozenset({0}), frozenset({0}), frozenset({1, 2}))
    assert diamond.composing_models() == ("left", "post", "pre", "right")


def test_independent_steps_share_a_stage(diamond: EnsemblePlan) -> None:
    assert diamond.stages() == [[0], [1, 2], [3]]


def test_only_the_steps_leading_to_the_wanted_outputs_are_needed(diamond: EnsemblePlan) -> None:
    assert diamond.steps_for(["OUT"]) == {0, 1, 2, 3}
    assert diamond.steps_for(["SIDE"]) == {0, 2}
    assert diamond.steps_for([]) == frozenset()


def test_a_step_starts_once_every_tensor_it_reads_exists(diamond: EnsemblePlan) -> None:
    flow = Dataflow(diamond, diamond.outputs, ["IN"])
    first = flow.take_ready()
    assert names(first) == ["pre"]
    assert flow.take_ready() == []  # handed out once
    flow.finished(first[0])
    branches = flow.take_ready()
    assert names(branches) == ["left", "right"]  # in parallel
    flow.finished(branches[1])
    assert flow.take_ready() == []  # post still waits for left
    flow.finished(branches[0])
    last = flow.take_ready()
    assert names(last) == ["post"]
    assert not flow.done
    flow.finished(last[0])
    assert flow.done


def test_a_subset_of_outputs_runs_only_its_steps(diamond: EnsemblePlan) -> None:
    flow = Dataflow(diamond, ["SIDE"], ["IN"])
    assert flow.needed == {0, 2}
    step = flow.take_ready()[0]
    flow.finished(step)
    assert names(flow.take_ready()) == ["right"]


def test_an_absent_optional_input_does_not_hold_a_step_back() -> None:
    plan = EnsemblePlan.from_config(config("""
        name: "opt"
        platform: "ensemble"
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] },
                { name: "HINT" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        ensemble_scheduling { step [ { model_name: "m"
            input_map [ { key: "A" value: "X" }, { key: "B" value: "HINT" } ]
            output_map { key: "C" value: "Y" } } ] }
    """))
    assert plan.optional_inputs == {"HINT"}
    flow = Dataflow(plan, ["Y"], ["X"])
    assert names(flow.take_ready()) == ["m"]
    assert flow.is_absent("HINT") and not flow.is_absent("X")


def test_an_invalid_graph_is_refused_with_the_validation_message() -> None:
    text = DIAMOND.replace('value: "b" }, { key: "INPUT1"', 'value: "nowhere" }, { key: "INPUT1"')
    with pytest.raises(InvalidArgument, match=r"^ensemble 'diamond': step 3 \(model 'post'\) "
                       r"reads tensor 'nowhere', which is neither"):
        EnsemblePlan.from_config(config(text))


def test_a_model_that_is_not_an_ensemble_has_no_plan() -> None:
    with pytest.raises(InvalidArgument, match="not an ensemble"):
        EnsemblePlan.from_config(config('name: "m" backend: "onnxruntime"'))


@st.composite
def chains(draw: st.DrawFn) -> str:
    """A random valid ensemble: step i reads the ensemble input or outputs of earlier steps."""
    count = draw(st.integers(1, 7))
    steps = []
    for index in range(count):
        sources = ["IN"] + [f"t{j}" for j in range(index)]
        reads = draw(st.lists(st.sampled_from(sources), min_size=1, max_size=3, unique=True))
        inputs = ", ".join(f'{{ key: "I{k}" value: "{tensor}" }}' for k, tensor in enumerate(reads))
        steps.append(f'{{ model_name: "m{index}" input_map [ {inputs} ] '
                     f'output_map {{ key: "O" value: "t{index}" }} }}')
    return f"""
        name: "random" platform: "ensemble"
        input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        output [ {{ name: "t{count - 1}" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        ensemble_scheduling {{ step [ {", ".join(steps)} ] }}
    """


@settings(max_examples=60, deadline=None)
@given(chains(), st.randoms(use_true_random=False))
def test_any_completion_order_runs_each_needed_step_once_after_its_inputs(
    text: str, order: object
) -> None:
    try:
        plan = EnsemblePlan.from_config(config(text))
    except InvalidArgument:
        return  # e.g. the input read by no step is refused; other graphs are covered above
    flow = Dataflow(plan, plan.outputs, ["IN"])
    needed = flow.needed
    available, started, running = {"IN"}, [], []
    running.extend(flow.take_ready())
    while running:
        step = running.pop(order.randrange(len(running)))  # type: ignore[attr-defined]
        assert step.reads <= available
        started.append(step.index)
        available |= step.writes
        flow.finished(step)
        running.extend(flow.take_ready())
    assert sorted(started) == sorted(needed)
    assert flow.done
