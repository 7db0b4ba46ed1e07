"""The sequence batcher and its plan, driven without sockets: slots and the backlog, the direct
and oldest batches, control and state tensors, idle expiry, and the config's rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.kernel.actors.scheduler.sequence_batcher import SequenceBatch, SequenceBatcher
from inferd.kernel.modelconfig.sequence_plan import SequencePlan, client_config, execution_config
from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import InferRequest, InferResponse
from inferd.protocols.tensors import from_numpy

MS = 1_000_000
CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def config(strategy: str = "", max_batch_size: int = 2, extra: str = CONTROLS) -> ModelConfig:
    parsed = ModelConfig()
    text_format.Parse(f"""
        name: "m" max_batch_size: {max_batch_size}
        input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        sequence_batching {{ max_sequence_idle_microseconds: 1000 {strategy} {extra} }}
    """, parsed)
    return parsed


def batcher(text: ModelConfig | None = None, instances: int = 1) -> SequenceBatcher[str]:
    return SequenceBatcher(SequencePlan.of(text or config(), None), instances)


def request(sequence: int | str, start: bool = False, end: bool = False,
            value: float = 1.0) -> InferRequest:
    parameters: dict[str, object] = {"sequence_id": sequence}
    if start:
        parameters["sequence_start"] = True
    if end:
        parameters["sequence_end"] = True
    tensor = from_numpy("INPUT", np.full((1, 1), value, np.float32))
    return InferRequest("m", (tensor,), parameters=parameters)


def admit(seq: SequenceBatcher[str], name: str, sequence: int | str, now: int = 0,
          **flags: bool) -> None:
    seq.admit(name, request(sequence, **flags), 1, now)


def inputs(batch: SequenceBatch[str], index: int) -> dict[str, object]:
    return {t.name: t.data.reshape(-1)[0] for t in batch.entries[index].request.inputs}


def answer(batch: SequenceBatch[str], state: float = 0.0) -> list[InferResponse | object]:
    state_tensor = from_numpy("S_OUT", np.full((1, 1), state, np.float32))
    output = from_numpy("OUTPUT", np.full((1, 1), state, np.float32))
    return [InferResponse("m", "1", (output, state_tensor)) for _ in batch.entries]


def test_direct_batches_keep_slots_and_fill_gaps_with_null_requests() -> None:
    seq = batcher()
    admit(seq, "a1", 1, start=True)
    admit(seq, "b1", 2, start=True)
    first = seq.next_batch(0, 0)
    assert first is not None and [e.item for e in first.entries] == ["a1", "b1"]
    assert seq.next_batch(0, 0) is None  # one batch at a time per instance
    seq.complete(first, answer(first, 5.0), 0)
    admit(seq, "b2", 2)
    second = seq.next_batch(0, 0)
    assert second is not None and [e.item for e in second.entries] == [None, "b2"]
    null, real = inputs(second, 0), inputs(second, 1)
    assert (null["READY"], null["START"], null["CORRID"]) == (False, 0, 0)
    assert (real["READY"], real["START"], real["END"], real["CORRID"]) == (True, 0, 0.0, 2)
    assert real["S_IN"] == 5.0  # the state the previous request left


def test_control_values_and_the_initial_state_at_start() -> None:
    seq = batcher()
    admit(seq, "x", 9, start=True, end=True)
    batch = seq.next_batch(0, 0)
    assert batch is not None
    values = inputs(batch, 0)
    assert (values["START"], values["END"], values["READY"], values["S_IN"]) == (1, 1.0, True, 0.0)
    types = {t.name: t.datatype for t in batch.entries[0].request.inputs}
    assert types == {"INPUT": "FP32", "START": "INT32", "END": "FP32", "READY": "BOOL",
                     "CORRID": "UINT64", "S_IN": "FP32"}
    [(item, result)] = seq.complete(batch, answer(batch, 3.0), 0)
    assert item == "x" and isinstance(result, InferResponse)
    assert [t.name for t in result.outputs] == ["OUTPUT"]  # the state output is the server's


def test_oldest_batches_the_oldest_waiting_sequences_without_nulls() -> None:
    seq = batcher(config("oldest { max_candidate_sequences: 3 }"))
    admit(seq, "a", 1, now=3, start=True)
    admit(seq, "b", 2, now=1, start=True)
    admit(seq, "c", 3, now=2, start=True)
    batch = seq.next_batch(0, 5)
    assert batch is not None and [e.item for e in batch.entries] == ["b", "c"]  # max_batch 2


def test_direct_waits_for_slot_utilization_up_to_the_queue_delay() -> None:
    seq = batcher(config("direct { max_queue_delay_microseconds: 1000 "
                         "minimum_slot_utilization: 1.0 }"))
    admit(seq, "a", 1, now=0, start=True)
    assert seq.next_batch(0, MS // 2) is None  # 1 of 2 slots, within the delay
    assert seq.wake_at() == MS
    batch = seq.next_batch(0, MS)
    assert batch is not None and [e.item for e in batch.entries] == ["a"]


def test_oldest_waits_for_a_preferred_batch_up_to_the_queue_delay() -> None:
    seq = batcher(config("oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] "
                         "max_queue_delay_microseconds: 1000 }", max_batch_size=4))
    admit(seq, "a", 1, now=0, start=True)
    assert seq.next_batch(0, MS // 2) is None
    admit(seq, "b", 2, now=MS // 2, start=True)
    batch = seq.next_batch(0, MS // 2)  # a preferred size: no more waiting
    assert batch is not None and [e.item for e in batch.entries] == ["a", "b"]


def test_sequences_beyond_the_slots_wait_in_the_backlog_until_one_ends() -> None:
    seq = batcher(config(max_batch_size=1))
    admit(seq, "a1", 1, start=True)
    admit(seq, "b1", 2, start=True)  # no slot: backlog
    first = seq.next_batch(0, 0)
    assert first is not None and [e.item for e in first.entries] == ["a1"]
    seq.complete(first, answer(first), 0)
    assert seq.next_batch(0, 0) is None  # b still waits
    admit(seq, "a2", 1, end=True)
    ending = seq.next_batch(0, 0)
    assert ending is not None
    seq.complete(ending, answer(ending), 0)
    taken = seq.next_batch(0, 0)
    assert taken is not None and [e.item for e in taken.entries] == ["b1"]


def test_requests_that_cannot_join_a_sequence_are_refused() -> None:
    seq = batcher()
    with pytest.raises(InvalidArgument, match="must specify a non-zero or non-empty correlation"):
        seq.admit("x", InferRequest("m", ()), 1, 0)
    with pytest.raises(InvalidArgument, match="for sequence 5 to model 'm' must specify the "
                                              "START flag"):
        admit(seq, "x", 5)
    with pytest.raises(InvalidArgument, match="must specify batch-size 1"):
        seq.admit("x", request(5, start=True), 2, 0)


def test_an_idle_sequence_is_released_and_must_start_again() -> None:
    seq = batcher()  # idle after 1000 µs
    admit(seq, "a", 1, start=True)
    batch = seq.next_batch(0, 0)
    assert batch is not None
    seq.complete(batch, answer(batch), 0)
    admit(seq, "b", 1, now=MS // 2)  # within the idle time
    batch = seq.next_batch(0, MS // 2)
    assert batch is not None
    seq.complete(batch, answer(batch), MS // 2)
    with pytest.raises(InvalidArgument, match="must specify the START flag"):
        admit(seq, "c", 1, now=MS // 2 + 2 * MS)
    assert seq.active() == 0


def test_a_start_on_a_live_sequence_resets_its_state() -> None:
    seq = batcher()
    admit(seq, "a", 1, start=True)
    batch = seq.next_batch(0, 0)
    assert batch is not None
    seq.complete(batch, answer(batch, 7.0), 0)
    admit(seq, "again", 1, start=True)
    batch = seq.next_batch(0, 0)
    assert batch is not None and inputs(batch, 0)["S_IN"] == 0.0


def test_drain_hands_back_every_queued_request() -> None:
    seq = batcher(config(max_batch_size=1))
    admit(seq, "a", 1, start=True)
    admit(seq, "b", 2, start=True)
    assert seq.pending() == 2
    assert sorted(seq.drain()) == ["a", "b"]
    assert seq.pending() == 0


# --------------------------------------------------------------- the plan


def test_the_backend_sees_control_and_state_tensors_and_clients_do_not() -> None:
    original = config()
    extended = execution_config(original)
    assert [e.name for e in extended.input] == ["INPUT", "START", "END", "READY", "CORRID", "S_IN"]
    assert [e.name for e in extended.output] == ["OUTPUT", "S_OUT"]
    assert [list(e.dims) for e in extended.input[1:]] == [[1]] * 5
    assert client_config(extended, original) == original


@pytest.mark.parametrize(("extra", "message"), [
    ('control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START } ] } ]',
     "must specify exactly one of 'int32_false_true', 'fp32_false_true' and 'bool_false_true'"),
    ('control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
     'data_type: TYPE_FP32 } ] } ]', "CONTROL_SEQUENCE_CORRID must set 'data_type'"),
    ('control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_START '
     'int32_false_true: [0, 1] } ] }, { name: "B" control [ { kind: CONTROL_SEQUENCE_START '
     'int32_false_true: [0, 1] } ] } ]', "CONTROL_SEQUENCE_START is given by more than one"),
    ('state [ { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: [ -1 ] } ]',
     "has variable dims"),
    ('state [ { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: [ 2 ] '
     'initial_state { name: "z" data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } } ]',
     "The data type used for 'initial_state' field of state 'I' does not match"),
    ('state [ { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: [ 2 ] '
     'initial_state { name: "z" data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } ]',
     "'initial_state' dim for input name 'I' doesn't match 'state' dim description. 3 != 2"),
    ('state [ { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: [ 2 ] '
     'use_growable_memory: true } ]', "state.use_growable_memory is not supported"),
    ("iterative_sequence: true", "iterative_sequence is not supported"),
])
def test_a_sequence_section_inferd_cannot_honour_is_refused_by_name(
        extra: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        SequencePlan.of(config(extra=extra), None)


def test_an_initial_state_file_is_read_from_the_models_initial_state_folder(
        tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "start.bin").write_bytes(
        np.array([1.5, -2.0], np.float32).tobytes())
    extra = ('state [ { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: [ 2 ] '
             'initial_state { name: "s" data_type: TYPE_FP32 dims: [ 2 ] '
             'data_file: "%s" } } ]')
    plan = SequencePlan.of(config(extra=extra % "start.bin"), tmp_path)
    np.testing.assert_array_equal(plan.states[0].initial, [1.5, -2.0])
    with pytest.raises(InvalidArgument, match="is not inside the model's initial_state/ folder"):
        SequencePlan.of(config(extra=extra % "../../etc/passwd"), tmp_path)
    (tmp_path / "initial_state" / "short.bin").write_bytes(b"\0\0")
    with pytest.raises(InvalidArgument, match="initial_state setting expects 8 bytes"):
        SequencePlan.of(config(extra=extra % "short.bin"), tmp_path)
