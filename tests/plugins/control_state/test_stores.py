"""The control-state record (``inferd.kernel.sdk.control_state``): its format and
its refusals, and its stores under concurrent writers, on a local path (flock + write-then-rename)
and on a real S3-compatible server (moto, conditional writes): no update is lost, no reader ever
sees a torn record, every file a record names is there."""

from __future__ import annotations

import json
import multiprocessing
import random
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.kernel.sdk.control_state import (
    VERSION,
    Entry,
    Record,
    RecordError,
    ControlStateStore,
    digest,
    dump_record,
    parse_record,
)
from inferd.kernel.runtime.plugin_manager import installed
from inferd.plugins.control_state import opening
from inferd.plugins.control_state.path import LocalStore
from inferd.plugins.control_state.s3 import S3Store

def open_store(where: str) -> ControlStateStore:
    """The store ``--model-control-state`` would open, among the installed plugins'."""
    return opening.open_store(where, installed().control_state_stores())


WRITERS = 6
CHANGES = 12


def test_round_trip() -> None:
    entry, blobs = Entry.of_load('{"max_batch_size": 4}', {"1/model.onnx": b"weights"})
    assert blobs == {digest(b"weights"): b"weights"}
    record = Record(3, {"m": entry, "plain": Entry()})
    assert parse_record(dump_record(record), "x") == record
    assert record.with_model("m", entry) is None  # already so: nothing to write
    assert record.without("absent") is None
    assert record.without("m") == {"plain": Entry()}


NAMES = st.text("abcxyz_-0123456789", min_size=1, max_size=12).filter(lambda n: n[0] != "-")
ENTRIES = st.builds(
    Entry, st.text(max_size=40),
    st.dictionaries(st.text("abc/1.", min_size=1, max_size=10),
                    st.binary(max_size=8).map(digest), max_size=3))
RECORDS = st.builds(Record, st.integers(0, 2**40), st.dictionaries(NAMES, ENTRIES, max_size=5))


@settings(max_examples=40, deadline=None)
@given(RECORDS)
def test_every_record_reads_back_as_written(record: Record) -> None:
    assert parse_record(dump_record(record), "r") == record


@settings(max_examples=40, deadline=None)
@given(RECORDS, st.data())
def test_a_damaged_record_is_refused_never_misread(record: Record, data: st.DataObject) -> None:
    """A torn or flipped record either reads as a record (JSON still valid) or is refused
    with a ``RecordError``: never another exception, never a crash."""
    written = dump_record(record)
    cut = data.draw(st.integers(0, len(written) - 2))
    with pytest.raises(RecordError):
        parse_record(written[:cut], "r")
    position = data.draw(st.integers(0, len(written) - 1))
    flipped = bytearray(written)
    flipped[position] ^= data.draw(st.integers(1, 255))
    try:
        assert isinstance(parse_record(bytes(flipped), "r"), Record)
    except RecordError:
        pass


@pytest.mark.parametrize(("data", "problem"), [
    (b"{oops", "not a model control state record (not JSON"),
    (b"[]", "not a model control state record (no \"format\""),
    (b'{"format": "something-else"}', "no \"format\""),
    (json.dumps({"format": "inferd-model-control-state", "version": VERSION + 1}).encode(),
     f"written in format version {VERSION + 1} by a newer inferd; this inferd reads version 1"),
    (json.dumps({"format": "inferd-model-control-state", "version": 1, "generation": -1,
                 "models": {}}).encode(), "\"generation\" must be a non-negative integer"),
    (json.dumps({"format": "inferd-model-control-state", "version": 1, "generation": 1,
                 "models": {}, "colour": 1}).encode(), "unknown field 'colour'"),
    (json.dumps({"format": "inferd-model-control-state", "version": 1, "generation": 1,
                 "models": {"m": {"config": "", "files": {"1/f": "abc"}}}}).encode(),
     "model 'm': file '1/f' must name a sha256"),
    (json.dumps({"format": "inferd-model-control-state", "version": 1, "generation": 1,
                 "models": {"../x": {"config": "", "files": {}}}}).encode(), "model '../x'"),
])
def test_refusals_name_the_record(data: bytes, problem: str) -> None:
    with pytest.raises(RecordError) as error:
        parse_record(data, "/srv/state.json")
    assert str(error.value).startswith("/srv/state.json: ")
    assert problem in str(error.value)


def test_open_store_refusals(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="does not exist"):
        open_store(str(tmp_path / "missing" / "state.json"))
    with pytest.raises(RecordError, match="a local path or an s3:// URL"):
        open_store("gs://bucket/state.json")
    with pytest.raises(RecordError, match="s3://bucket/key"):
        open_store("s3://bucket-only")


def test_a_damaged_file_override_is_refused(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "state.json"))
    entry, blobs = Entry.of_load("{}", {"1/model.bin": b"weights"})
    store.update(lambda record: record.with_model("m", entry), blobs)
    assert store.blob(digest(b"weights")) == b"weights"
    (tmp_path / "state.json.files" / digest(b"weights")).write_bytes(b"weightz")
    with pytest.raises(RecordError, match="is damaged"):
        store.blob(digest(b"weights"))
    store.update(lambda record: record.without("m"), {})
    assert not list((tmp_path / "state.json.files").iterdir())  # no model names it: removed


def _writer(store: ControlStateStore, worker: int, seed: int) -> dict[str, Entry]:
    """Random loads and unloads of the worker's own models; what it last wrote of each."""
    chooser = random.Random(seed)
    mine: dict[str, Entry] = {}
    for change in range(CHANGES):
        name = f"w{worker}_m{chooser.randrange(4)}"
        if name in mine and chooser.random() < 0.3:
            store.update(lambda record, name=name: record.without(name), {})  # type: ignore[misc]
            del mine[name]
            continue
        content = f"{worker}-{change}".encode()
        entry, blobs = Entry.of_load(f'{{"change": {change}}}', {"1/model.bin": content})
        store.update(lambda record, name=name, entry=entry: record.with_model(name, entry),
                     blobs)  # type: ignore[misc]
        mine[name] = entry
    return mine


def _process_writer(where: str, worker: int, results: Any) -> None:
    results.put((worker, _writer(open_store(where), worker, worker)))


def _run_processes(where: str) -> dict[str, Entry]:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [context.Process(target=_process_writer, args=(where, w, results))
               for w in range(WRITERS)]
    for worker in workers:
        worker.start()
    expected: dict[str, Entry] = {}
    for _ in workers:
        _, written = results.get(timeout=120)
        expected.update(written)
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    return expected


def _check(store: ControlStateStore, expected: dict[str, Entry]) -> None:
    record, _ = store.read()
    assert dict(record.models) == expected
    for entry in record.models.values():
        for path, sha in entry.files.items():
            assert digest(store.blob(sha)) == sha, path


def _run_threads(make_store: Any, reader_store: ControlStateStore) -> dict[str, Entry]:
    """WRITERS threads writing at once while a reader keeps parsing the record."""
    expected: dict[str, Entry] = {}
    errors: list[BaseException] = []
    done = threading.Event()

    def write(worker: int) -> None:
        try:
            expected.update(_writer(make_store(), worker, 1000 + worker))
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    def read() -> None:
        seen = -1
        while not done.is_set():
            try:
                record, _ = reader_store.read()  # never torn, never going back
            except BaseException as error:  # noqa: BLE001
                errors.append(error)
                return
            if record.generation < seen:
                errors.append(AssertionError(f"generation {seen} then {record.generation}"))
            seen = record.generation

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    reader = threading.Thread(target=read)
    reader.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive(), "a writer did not finish within 120 s"
    done.set()
    reader.join(30)
    assert not errors, errors
    return expected


def test_local_threads_lose_no_update(tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    expected = _run_threads(lambda: LocalStore(path), LocalStore(path))
    _check(LocalStore(path), expected)
    record, _ = LocalStore(path).read()
    # Files nobody names any more were collected; none that a model names was.
    stored = {p.name for p in (tmp_path / "state.json.files").iterdir()}
    assert stored == {sha for e in record.models.values() for sha in e.files.values()}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".state.json.")]


def test_local_processes_lose_no_update(tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    _check(LocalStore(path), _run_processes(path))


def test_s3_threads_lose_no_update(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    s3_server.client().create_bucket(Bucket="state")
    url = s3_server.url("state/replicas/record.json")
    store = open_store(url)
    assert isinstance(store, S3Store)
    assert store.read() == (Record(), None) and store.token() is None
    expected = _run_threads(lambda: S3Store(url), S3Store(url))
    _check(store, expected)
    record, token = store.read()
    assert token == store.token()
    # Every change was one compare-and-swap: the generation counts the writes that changed
    # something, and none was lost (the record holds each worker's last word).
    assert record.generation >= len(expected)


def test_s3_processes_lose_no_update(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)  # the spawned writers inherit them
    s3_server.client().create_bucket(Bucket="state-processes")
    url = s3_server.url("state-processes/record.json")
    _check(S3Store(url), _run_processes(url))


def test_s3_errors_name_the_record(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    missing = S3Store(s3_server.url("no-such-bucket/record.json"))
    with pytest.raises(RecordError, match="no-such-bucket"):
        missing.update(lambda record: {"m": Entry()}, {})
    s3_server.client().create_bucket(Bucket="corrupt")
    s3_server.client().put_object(Bucket="corrupt", Key="r.json", Body=b"{half")
    with pytest.raises(RecordError, match="r.json: not a model control state record"):
        S3Store(s3_server.url("corrupt/r.json")).read()
