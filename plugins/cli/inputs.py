"""What the ``inferd`` client commands read from their arguments and files: ``--input
NAME=JSON|@file.npy`` tensors, ``--file VERSION/NAME=LOCAL`` load overrides and ``--config``
files (JSON, or config.pbtxt text turned into JSON).

Every problem is an ``ArgumentProblem`` saying which argument is wrong and how (the command
turns it into a usage error, exit code 2). Owns no I/O beyond reading the named local files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from inferd.plugins.cli.connection import InputSpec, InputTensor


class ArgumentProblem(ValueError):
    """An argument the command cannot use; ``str()`` says why."""


# KServe datatype -> numpy dtype for inputs given as JSON (BYTES is handled apart).
_NUMPY = {
    "BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}


def split_assignment(text: str, flag: str, form: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name.strip():
        raise ArgumentProblem(f"{flag} {text}: expected {form}")
    return name.strip(), value


def input_tensors(arguments: Sequence[str], specs: Sequence[InputSpec]) -> list[InputTensor]:
    """The ``--input`` arguments as tensors. A JSON value takes the datatype the model
    declares for that input (FP64/INT64/BYTES/BOOL from the JSON itself for an input the model
    does not declare, so that the server names the mistake); a leading batch dimension the
    model expects and the value lacks is added. A ``.npy`` file is sent as it is."""
    by_name = {spec.name: spec for spec in specs}
    tensors = []
    for text in arguments:
        name, value = split_assignment(text, "--input", "NAME=JSON or NAME=@file.npy")
        spec = by_name.get(name)
        if value.startswith("@"):
            tensors.append(_npy_input(name, value[1:]))
            continue
        try:
            document = json.loads(value)
        except ValueError as error:
            raise ArgumentProblem(f"--input {text}: the value is not JSON ({error}); "
                                  "give NAME=JSON or NAME=@file.npy") from None
        data = _json_array(text, document, spec.datatype if spec else None)
        if spec is not None and len(spec.shape) == data.ndim + 1 and spec.shape[0] == -1:
            data = data[np.newaxis, ...]
        tensors.append(InputTensor(name, spec.datatype if spec else _datatype(data), data))
    return tensors


def _npy_input(name: str, path: str) -> InputTensor:
    try:
        data = np.load(path, allow_pickle=False)
    except OSError as error:
        raise ArgumentProblem(f"--input {name}=@{path}: {error.strerror or error}") from None
    except ValueError as error:
        raise ArgumentProblem(f"--input {name}=@{path}: not a .npy array ({error})") from None
    if not isinstance(data, np.ndarray):
        raise ArgumentProblem(f"--input {name}=@{path}: a .npz archive; give one .npy array")
    if data.dtype.kind in "US":  # text arrays travel as BYTES
        data = np.array([s.encode() if isinstance(s, str) else bytes(s)
                         for s in data.reshape(-1).tolist()], dtype=object).reshape(data.shape)
    return InputTensor(name, _datatype(data), data)


def _json_array(text: str, document: object, datatype: str | None) -> np.ndarray:
    try:
        if datatype == "BYTES" or (datatype is None and _all_strings(document)):
            array = np.array(document, dtype=object)
            encode = np.vectorize(
                lambda item: item.encode() if isinstance(item, str) else str(item).encode(),
                otypes=[object])
            return encode(array) if array.size else array
        if datatype is not None and datatype not in _NUMPY:
            raise ArgumentProblem(f"--input {text}: a {datatype} input cannot be given as "
                                  "JSON; give a .npy file")
        array = np.array(document, dtype=_NUMPY[datatype] if datatype else None)
    except (TypeError, ValueError, OverflowError) as error:
        raise ArgumentProblem(f"--input {text}: not a {datatype or 'numeric'} array "
                              f"({error})") from None
    if array.dtype == object:
        raise ArgumentProblem(f"--input {text}: not a rectangular array")
    return array


def _all_strings(document: object) -> bool:
    if isinstance(document, list):
        return bool(document) and all(_all_strings(item) for item in document)
    return isinstance(document, str)


def _datatype(data: np.ndarray) -> str:
    if data.dtype == object:
        return "BYTES"
    for name, kind in _NUMPY.items():
        if data.dtype == np.dtype(kind):
            return name
    raise ArgumentProblem(f"a {data.dtype} array has no KServe datatype")


def override_files(arguments: Sequence[str]) -> dict[str, bytes]:
    """``--file VERSION/NAME=LOCAL`` arguments as ``{"VERSION/NAME": content}``."""
    files = {}
    for text in arguments:
        target, local = split_assignment(text, "--file", "VERSION/NAME=LOCAL_PATH")
        if "/" not in target.strip("/"):
            raise ArgumentProblem(f"--file {text}: the target is <version>/<name>, e.g. "
                                  "1/model.onnx")
        try:
            files[target] = Path(local).read_bytes()
        except OSError as error:
            raise ArgumentProblem(f"--file {text}: {local}: "
                                  f"{error.strerror or error}") from None
    return files


def config_override(path: str) -> str:
    """The ``--config`` file as the JSON text a load takes: a ``.json`` file as it is (the
    server validates it), anything else parsed as config.pbtxt text here."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ArgumentProblem(f"--config {path}: "
                              f"{getattr(error, 'strerror', None) or error}") from None
    if path.endswith(".json"):
        return text
    from google.protobuf import json_format

    from inferd.kernel.sdk.modelconfig import parse_config_text
    from inferd.protocols.errors import InferdError

    try:
        config = parse_config_text(text, path)
    except InferdError as error:
        raise ArgumentProblem(f"--config {error.message}") from None
    text = json_format.MessageToJson(config, preserving_proto_field_name=True, indent=None)
    return str(text)
