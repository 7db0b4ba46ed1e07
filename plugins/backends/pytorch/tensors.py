"""The way between inferd's numpy tensors and torch tensors, and which datatypes cross it.

Owns the datatype table (the types Triton's pytorch backend accepts, plus BF16 carried as
its raw 16 bits), handing inputs to torch without copying them (``torch.from_numpy``; for
device memory, ``torch.as_tensor`` over its ``__cuda_array_interface__``) and taking outputs
back as numpy views of the tensors' own memory where the tensor allows it.
Torch is handed in by the caller: this module imports no torch, so the table is usable (and
testable) without it.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from inferd.protocols.errors import InvalidArgument

_TORCH_DTYPE_NAMES: dict[int, str] = {
    model_config_pb2.TYPE_BOOL: "bool",
    model_config_pb2.TYPE_UINT8: "uint8",
    model_config_pb2.TYPE_INT8: "int8",
    model_config_pb2.TYPE_INT16: "int16",
    model_config_pb2.TYPE_INT32: "int32",
    model_config_pb2.TYPE_INT64: "int64",
    model_config_pb2.TYPE_FP16: "float16",
    model_config_pb2.TYPE_FP32: "float32",
    model_config_pb2.TYPE_FP64: "float64",
    model_config_pb2.TYPE_BF16: "bfloat16",
}
"""Config type -> torch dtype name. Triton's pytorch backend refuses UINT16/32/64 (torch has
next to no kernels for them) and runs strings only as ``List[str]``, which inferd does not."""

_CONFIG_TYPES_BY_TORCH_NAME = {name: config for config, name in _TORCH_DTYPE_NAMES.items()}

# torch warns on every read-only array it wraps; the backend decides itself when to copy.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def type_name(data_type: int) -> str:
    return str(model_config_pb2.DataType.Name(data_type))


def torch_dtype_name(data_type: int, kind: str, tensor: str, model: str) -> str:
    """The torch dtype name for a config type, or Triton's refusal (``ValidateInputs``)."""
    name = _TORCH_DTYPE_NAMES.get(data_type)
    if name is None:
        reason = ""
        if data_type == model_config_pb2.TYPE_STRING:
            reason = (
                " (inferd's pytorch backend runs tensors of numbers and booleans only; "
                "string data needs another backend, e.g. a python model in front)"
            )
        raise InvalidArgument(
            f"unsupported datatype {type_name(data_type)} for {kind} '{tensor}' for model "
            f"'{model}'{reason}"
        )
    return name


def config_type_of(torch_dtype: Any) -> int:
    """The config type of a torch dtype (``TYPE_INVALID`` for one a config cannot carry)."""
    name = str(torch_dtype).removeprefix("torch.")
    config_type: int = _CONFIG_TYPES_BY_TORCH_NAME.get(name, model_config_pb2.TYPE_INVALID)
    return config_type


def to_torch(torch: ModuleType, array: np.ndarray, bfloat16: bool, copy: bool) -> Any:
    """A CPU tensor over ``array``'s memory (a copy only when ``copy``, or when numpy's
    layout is one torch cannot wrap: negative strides). BF16 arrives as raw uint16 bits."""
    if copy or any(stride < 0 for stride in array.strides):
        array = np.array(array, copy=True)
    if bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def to_numpy(torch: ModuleType, tensor: Any) -> np.ndarray:
    """``tensor``'s values as numpy: a view of a CPU tensor's memory, one copy off a GPU.
    BF16 comes back as raw uint16 bits, as inferd carries it."""
    if not isinstance(tensor, torch.Tensor):
        raise InvalidArgument(f"the model returned a {type(tensor).__name__}, not a tensor")
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if tensor.is_conj() or tensor.is_neg():
        tensor = tensor.resolve_conj().resolve_neg()
    if tensor.dtype == torch.bfloat16:
        return np.asarray(tensor.view(torch.int16).numpy().view(np.uint16))
    return np.asarray(tensor.numpy())


class _CudaArray:
    """Device memory as ``__cuda_array_interface__`` (version 3) describes it, for torch to wrap
    without a copy; torch's tensor holds it, and it holds ``owner``, what keeps the memory
    valid. No stream: the client finished writing before it sent the request."""

    def __init__(self, pointer: int, shape: tuple[int, ...], typestr: str, owner: Any) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (pointer, False), "strides": None,
            "version": 3,
        }
        self.owner = owner


def device_view(torch: ModuleType, pointer: int, shape: tuple[int, ...], dtype: np.dtype[Any],
                device: Any, owner: Any = None) -> Any:
    """A torch tensor over ``shape`` elements of ``dtype`` at device address ``pointer``, no
    copy. ``uint16`` is BF16's raw bits (the only 16-bit unsigned type the backend takes)."""
    bfloat16 = dtype == np.dtype("<u2")
    typestr = "<i2" if bfloat16 else dtype.str
    tensor = torch.as_tensor(_CudaArray(pointer, tuple(shape), typestr, owner), device=device)
    return tensor.view(torch.bfloat16) if bfloat16 else tensor


def write_on_device(torch: ModuleType, tensor: Any, pointer: int, device: Any) -> None:
    """``tensor`` copied to ``pointer`` on the CUDA device ``device`` (device-to-device from
    the instance's own outputs), complete when this returns: the client reads it once it has
    the response."""
    if tensor.is_conj() or tensor.is_neg():
        tensor = tensor.resolve_conj().resolve_neg()
    dtype = np.dtype("<u2") if tensor.dtype == torch.bfloat16 else np.dtype(
        str(tensor.dtype).removeprefix("torch."))
    target = device_view(torch, pointer, tuple(tensor.shape), dtype, device)
    target.copy_(tensor)
    torch.cuda.current_stream(device).synchronize()
