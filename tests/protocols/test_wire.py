"""Tests of inferd.protocols.wire.codec: every message kind round-trips, tensors stay zero-copy,
and malformed frames raise InvalidArgument and nothing else."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import types
import typing
import weakref
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from inferd.protocols.errors import InvalidArgument
from inferd.protocols.messages import (
    MESSAGE_KINDS,
    Ack,
    BatchResult,
    InferBatch,
    Envelope,
    Failure,
    HealthRequest,
    InferRequest,
    InferResponse,
    Message,
    Tensor,
)
from inferd.protocols.tensors import DATATYPES, from_numpy, numpy_dtype
from inferd.protocols.wire.codec import VERSION, decode, encode

# ------------------------------------------------------------------------------ strategies


def tensors_of(datatype: str) -> st.SearchStrategy[Tensor]:
    shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)
    if datatype == "BYTES":
        arrays = shapes.flatmap(
            lambda shape: st.lists(
                st.binary(max_size=8),
                min_size=int(np.prod(shape)),
                max_size=int(np.prod(shape)),
            ).map(lambda items: _object_array(items, shape))
        )
    else:
        arrays = hnp.arrays(numpy_dtype(datatype), shapes)
    names = st.text(max_size=8)
    return st.builds(lambda name, array: Tensor(name, datatype, array.shape, array), names, arrays)


def _object_array(items: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array.reshape(shape)


any_tensor = st.sampled_from(DATATYPES).flatmap(tensors_of)

plain_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda children: (
        st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


def strategy_for(hint: Any) -> st.SearchStrategy[Any]:
    """Values of a message field's type hint, built independently of the codec."""
    if hint is Any:
        return plain_values
    if hint is str:
        return st.text(max_size=12)
    if hint is bytes:
        return st.binary(max_size=16)
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.integers(-(2**63), 2**64 - 1)
    if hint is float:
        return st.floats(allow_nan=False)
    if hint is type(None):
        return st.none()
    if hint is Tensor:
        return any_tensor
    if isinstance(hint, type) and issubclass(hint, Message):
        return messages_of(hint)
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([strategy_for(argument) for argument in arguments])
    if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
        return st.lists(strategy_for(arguments[0]), max_size=3).map(tuple)
    if origin is tuple:
        return st.tuples(*(strategy_for(argument) for argument in arguments))
    if origin is dict:
        return st.dictionaries(st.text(max_size=6), strategy_for(arguments[1]), max_size=3)
    raise AssertionError(f"no strategy for {hint!r}: extend the test with the new field type")


def messages_of(kind: type[Message]) -> st.SearchStrategy[Message]:
    hints = typing.get_type_hints(kind)
    fields = {field.name: strategy_for(hints[field.name]) for field in dataclasses.fields(kind)}  # type: ignore[arg-type]
    return st.builds(kind, **fields)


def envelopes_of(body: st.SearchStrategy[Message]) -> st.SearchStrategy[Envelope]:
    optional_int = st.none() | st.integers(-(2**63), 2**64 - 1)
    return st.builds(
        Envelope,
        msg_id=st.integers(0, 2**64 - 1),
        src=st.text(max_size=10),
        dst=st.text(max_size=10),
        body=body,
        reply_to=optional_int,
        deadline=st.none() | st.floats(allow_nan=False),
        trace=st.none() | st.text(max_size=10),
    )


def round_trip(envelope: Envelope) -> Envelope:
    return decode(encode(envelope))


def frames_of(body: Message) -> list[Any]:
    return list(encode(Envelope(1, "src", "dst", body)))


def header_of(body: Message) -> tuple[Any, ...]:
    frames = frames_of(body)
    return msgpack.unpackb(frames[1], use_list=False, ext_hook=lambda code, data: (code, data))


def with_header(frames: list[Any], header: Any) -> list[Any]:
    return [frames[0], msgpack.packb(header), *frames[2:]]


# ---------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("kind", sorted(MESSAGE_KINDS))
@given(data=st.data())
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_message_kind_round_trips(kind: str, data: st.DataObject) -> None:
    envelope = data.draw(envelopes_of(messages_of(MESSAGE_KINDS[kind])))
    decoded = round_trip(envelope)
    assert decoded == envelope
    assert type(decoded.body) is MESSAGE_KINDS[kind]


@given(st.lists(any_tensor, max_size=5))
@settings(deadline=None)
def test_infer_request_with_any_tensors_round_trips(inputs: list[Tensor]) -> None:
    request = InferRequest("model", tuple(inputs), version="2", id="r1", outputs=("y",))
    envelope = Envelope(7, "frontend", "scheduler", request, reply_to=3, deadline=1.5, trace="t")
    assert round_trip(envelope) == envelope


def test_infer_request_with_several_tensors() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    inputs = (
        from_numpy("dense", base),
        from_numpy("strided", base[::2, ::3]),
        from_numpy("transposed", base.T),
        from_numpy("words", [["héllo", ""], ["a\x00b", "z"]]),
        from_numpy("flags", np.array([True, False])),
        from_numpy("half", np.array([1.5, -0.0, np.inf], np.float16)),
        from_numpy("brain", np.array([1.0, 3.0], np.float32), "BF16"),
        from_numpy("empty", np.empty((0, 3), np.int64)),
        from_numpy("scalar", np.array(5, np.uint64)),
    )
    envelope = Envelope(1, "a", "b", InferRequest("m", inputs, parameters={"k": 1.5}))
    frames = encode(envelope)
    assert len(frames) == 2 + len(inputs)
    decoded = decode(frames)
    assert decoded == envelope
    assert decoded.body.inputs[2].data.tolist() == base.T.tolist()  # type: ignore[attr-defined]


def test_batch_result_with_responses_and_failures() -> None:
    responses = [
        InferResponse("m", "1", (from_numpy("y", np.full((1, 3), i, np.float32)),), id=str(i))
        for i in range(3)
    ]
    results = (responses[0], Failure("INTERNAL", "boom"), responses[1], responses[2])
    envelope = Envelope(9, "executor", "scheduler", BatchResult(results, (1, 2, 3), 42))
    frames = encode(envelope)
    assert len(frames) == 2 + 3
    decoded = decode(frames)
    assert decoded == envelope
    assert [type(result) for result in decoded.body.results] == [  # type: ignore[attr-defined]
        InferResponse,
        Failure,
        InferResponse,
        InferResponse,
    ]


def test_tensors_and_messages_inside_parameters() -> None:
    request = InferRequest(
        "m", (), parameters={"t": from_numpy("x", [1, 2]), "f": Failure("NOT_FOUND", "m")}
    )
    envelope = Envelope(1, "a", "b", request)
    assert round_trip(envelope) == envelope


def test_lists_in_dict_values_come_back_as_tuples() -> None:
    request = InferRequest("m", (), parameters={"shape": [1, [2, 3]], "n": np.int32(4)})
    decoded = round_trip(Envelope(1, "a", "b", request)).body
    assert decoded.parameters == {"shape": (1, (2, 3)), "n": 4}  # type: ignore[attr-defined]


def test_frame_layout() -> None:
    array = np.arange(3, dtype=np.int32)
    frames = encode(Envelope(5, "a", "b", InferRequest("m", (from_numpy("x", array),))))
    assert frames[0] == VERSION
    header = msgpack.unpackb(frames[1], use_list=False, ext_hook=lambda code, data: (code, data))
    assert header[:7] == (5, "InferRequest", "a", "b", None, None, None)
    assert bytes(frames[2]) == array.tobytes()


# ---------------------------------------------------------------------------- zero copy


def test_encode_sends_array_memory_and_decode_wraps_frames() -> None:
    array = np.arange(1000, dtype=np.float64).reshape(10, 100)
    envelope = Envelope(1, "a", "b", InferRequest("m", (from_numpy("x", array),)))
    frames = encode(envelope)
    assert isinstance(frames[2], memoryview)
    assert np.shares_memory(np.frombuffer(frames[2], np.float64), array)
    received = [bytes(frames[0]), bytes(frames[1]), bytearray(frames[2])]
    tensor = decode(received).body.inputs[0]  # type: ignore[attr-defined]
    assert np.shares_memory(tensor.data, np.frombuffer(received[2], np.uint8))
    received[2][0:8] = np.float64(-1).tobytes()
    assert tensor.data[0, 0] == -1


def test_decode_accepts_zmq_frames() -> None:
    array = np.arange(6, dtype=np.int16).reshape(2, 3)
    envelope = Envelope(1, "a", "b", InferRequest("m", (from_numpy("x", array),)))
    zmq_frames = [zmq.Frame(frame) for frame in encode(envelope)]
    decoded = decode(zmq_frames)
    assert decoded == envelope
    assert np.shares_memory(
        decoded.body.inputs[0].data, np.frombuffer(zmq_frames[2].buffer, np.uint8)
    )  # type: ignore[attr-defined]


def test_codec_keeps_no_reference_cycles() -> None:
    array = np.arange(10, dtype=np.float32)
    alive = weakref.ref(array)
    gc.disable()
    try:
        frames = encode(Envelope(1, "a", "b", InferRequest("m", (from_numpy("x", array),))))
        decoded = decode(frames)
        del array, frames, decoded
        assert alive() is None
    finally:
        gc.enable()


# -------------------------------------------------------------------------- bad input


def test_too_few_frames() -> None:
    with pytest.raises(InvalidArgument, match="at least 2 frames"):
        decode([VERSION])


def test_unknown_version() -> None:
    frames = frames_of(Ack())
    with pytest.raises(InvalidArgument, match="wire version b'\\\\x02'"):
        decode([b"\x02", *frames[1:]])
    with pytest.raises(InvalidArgument, match="wire version b'ab'"):
        decode([memoryview(b"ab"), *frames[1:]])


def test_garbage_header() -> None:
    with pytest.raises(InvalidArgument, match="malformed message header"):
        decode([VERSION, b"\xc1\xff"])
    with pytest.raises(InvalidArgument, match="malformed message header"):
        decode([VERSION, msgpack.packb([1, 2, 3])])


def test_unknown_kind() -> None:
    frames = frames_of(Ack())
    header = list(header_of(Ack()))
    header[1] = "Explode"
    with pytest.raises(InvalidArgument, match="unknown message kind 'Explode'"):
        decode(with_header(frames, header))


def test_wrong_field_count_and_types() -> None:
    frames = frames_of(HealthRequest("ready"))
    header = list(header_of(HealthRequest("ready")))
    header[7] = ("ready", "extra")
    with pytest.raises(InvalidArgument, match="HealthRequest needs 1 field values, got 2"):
        decode(with_header(frames, header))
    header[7] = (5,)
    with pytest.raises(InvalidArgument, match=r"HealthRequest\.what"):
        decode(with_header(frames, header))
    header[7] = "ready"
    with pytest.raises(InvalidArgument, match="HealthRequest needs 1 field values"):
        decode(with_header(frames, header))


def test_wrong_envelope_field_types() -> None:
    frames = frames_of(Ack())
    header = list(header_of(Ack()))
    header[0] = "one"
    with pytest.raises(InvalidArgument, match="envelope field"):
        decode(with_header(frames, header))


def test_tensor_where_a_message_is_expected() -> None:
    request = InferRequest("m", (from_numpy("x", [1]),))
    frames = frames_of(request)
    header = list(header_of(request))
    tensor_ext = header[7][1][0]
    header[7] = (msgpack.ExtType(*tensor_ext),)
    header[1] = "Index"
    with pytest.raises(InvalidArgument, match=r"Index\.entries"):
        decode(with_header(frames, header))


def test_failure_where_a_tensor_is_expected() -> None:
    failure_ext = msgpack.ExtType(2, msgpack.packb(("Failure", "INTERNAL", "x")))
    request = InferRequest("m", ())
    header = list(header_of(request))
    header[7] = ("m", (failure_ext,), *header[7][2:])
    with pytest.raises(InvalidArgument, match=r"InferRequest\.inputs"):
        decode(with_header(frames_of(request), header))


def test_buffer_index_out_of_range() -> None:
    frames = frames_of(InferRequest("m", (from_numpy("x", [1, 2]),)))
    with pytest.raises(InvalidArgument, match="refers to buffer 0 but the message has 0 buffers"):
        decode(frames[:2])


def test_wrong_tensor_byte_size() -> None:
    frames = frames_of(InferRequest("m", (from_numpy("x", np.zeros(4, np.float32)),)))
    with pytest.raises(InvalidArgument, match=r"'x'.*16 bytes, received 12"):
        decode([*frames[:2], bytes(12)])


def test_malformed_tensor_descriptor_and_unknown_extension() -> None:
    frames = frames_of(InferRequest("m", (from_numpy("x", [1]),)))
    header = list(header_of(InferRequest("m", (from_numpy("x", [1]),))))
    fields = list(header[7])
    for bad in [msgpack.packb(("x", "INT64")), msgpack.packb(("x", "INT64", "1", 0)), b"\xc1"]:
        fields[1] = (msgpack.ExtType(1, bad),)
        header[7] = tuple(fields)
        with pytest.raises(InvalidArgument):
            decode(with_header(frames, header))
    fields[1] = (msgpack.ExtType(42, b""),)
    header[7] = tuple(fields)
    with pytest.raises(InvalidArgument, match="unknown extension type 42"):
        decode(with_header(frames, header))


def test_deeply_nested_messages() -> None:
    data = msgpack.packb(("Ack",))
    for _ in range(5000):
        data = msgpack.packb(("Index", (msgpack.ExtType(2, data),)))
    header = msgpack.packb((1, "Index", "a", "b", None, None, None, ((msgpack.ExtType(2, data),),)))
    with pytest.raises(InvalidArgument, match="nested more than 32 deep"):
        decode([VERSION, header])


def test_encode_refuses_deeply_nested_messages() -> None:
    request = InferRequest("m", ())
    for _ in range(40):
        request = InferRequest("m", (), parameters={"inner": request})
    with pytest.raises(InvalidArgument, match="nested more than 32 deep"):
        encode(Envelope(1, "a", "b", request))


@given(st.binary(max_size=200))
def test_arbitrary_headers_raise_only_invalid_argument(header: bytes) -> None:
    with contextlib.suppress(InvalidArgument):  # any other exception fails the test
        decode([VERSION, header, b"\x00" * 16])


@given(st.data())
@settings(deadline=None)
def test_corrupted_headers_raise_only_invalid_argument(data: st.DataObject) -> None:
    request = InferRequest(
        "m", (from_numpy("x", np.arange(4, dtype=np.int32)), from_numpy("s", ["ab"]))
    )
    frames = frames_of(request)
    header = bytearray(frames[1])
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(header) - 1))
        header[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(header)))
    with contextlib.suppress(InvalidArgument):  # any other exception fails the test
        decode([VERSION, bytes(header[:cut] if cut else header), *frames[2:]])


def test_encode_rejects_unregistered_kinds_and_values() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Stranger(Message):
        value: int

    with pytest.raises(InvalidArgument, match="Stranger is not a registered message kind"):
        encode(Envelope(1, "a", "b", Stranger(1)))
    with pytest.raises(InvalidArgument, match="object"):
        encode(Envelope(1, "a", "b", InferRequest("m", (), parameters={"x": object()})))
    with pytest.raises(InvalidArgument):
        encode(Envelope(2**65, "a", "b", Ack()))


# ---------------------------------------------------------------------------- flat kinds


def test_batches_travel_flat_and_fall_back_to_the_generic_layout() -> None:
    request = InferRequest("m", (from_numpy("x", [1, 2]),), parameters={"p": 1})
    flat = header_of(InferBatch("m", 1, 2, (request,)))
    assert flat[1] == "flat:InferBatch"
    name, _, shape, buffer_index = flat[7][3][0][1][0]  # a plain array, no extension
    assert (name, shape, buffer_index) == ("x", (2,), 0)
    with_tensor = InferRequest("m", (), parameters={"t": from_numpy("x", [1])})
    generic = InferBatch("m", 1, 2, (with_tensor,))
    assert header_of(generic)[1] == "InferBatch"
    assert round_trip(Envelope(1, "a", "b", generic)).body == generic
    response = InferResponse("m", "1", (), parameters={"f": Failure("NOT_FOUND", "x")})
    result = BatchResult((response,))
    assert header_of(result)[1] == "BatchResult"
    assert round_trip(Envelope(1, "a", "b", result)).body == result


@pytest.mark.parametrize("kind, values, message", [
    ("flat:InferBatch", ("m", 1, 2), "malformed InferBatch: not enough values"),
    ("flat:InferBatch", ("m", "1", 2, ()), "field 'version' has a value of the wrong type"),
    ("flat:InferBatch", ("m", 1, 2, (("m", (), "", "", ("y", 3), {}, 0, 0, {}),)),
     "field 'outputs' holds a name that is not a string"),
    ("flat:InferBatch", ("m", 1, 2, (("m", (), "", "", (), {b"k": 2}, 0, 0, {}),)),
     "field 'parameters' holds a name that is not a string"),
    ("flat:InferBatch", ("m", 1, 2, (("m", (), "", "", (), {}, 0, 0, {b"k": 1}),)),
     "field 'classification' holds a name that is not a string"),
    ("flat:InferBatch", ("m", 1, 2, (("m", [("x", "INT32", (1,), 0)], "", "", (), {}, 0, 0, {}),)),
     "refers to buffer 0 but the message has 0 buffers"),
    ("flat:BatchResult", ((), (1, 2), 0), "compute_ns must be three integers"),
    ("flat:BatchResult", ((), (1, 2, 3), "0"), "field 'started_ns' has a value"),
    ("flat:BatchResult", ((("CODE", 5),), (1, 2, 3), 0), "field 'message' has a value"),
    ("flat:BatchResult", ((("m", "1", "not a list", "", {}),), (1, 2, 3), 0),
     "malformed tensor list"),
    ("flat:BatchResult", "nothing", "expected an array of field values"),
])
def test_malformed_flat_kinds_are_refused(kind: str, values: Any, message: str) -> None:
    header = (1, kind, "a", "b", None, None, None, values)
    with pytest.raises(InvalidArgument, match=message):
        decode([b"\x01", msgpack.packb(header)])
