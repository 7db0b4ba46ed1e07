"""The regions clients register (the KServe extension's ``systemsharedmemory``), by name.

Owns the regions clients register: opening the POSIX shared-memory object of a key
(``/dev/shm/<key>``) read/write and mapping the registered window of it, refusing a window past
the object's end, the name -> region map and its status rows (sorted by name, as Triton
lists them), the bounds of the window a request names and whether it holds its input's bytes,
and memoryviews over it (zero copy). The client owns its objects: this module
never creates, resizes or unlinks one, and never goes through ``multiprocessing``'s resource
tracker (which unlinks what it tracks when the process exits). Unregistering drops the name at
once; the mapping itself lives until the last view of it is gone (a request in flight keeps
its views), so an unregister never pulls memory from under a running request. CUDA regions
are ``inferd.plugins.shared_memory.cuda``'s; this registry keeps their names and system
names apart (one name, one region, of either kind, as in Triton) and routes a request's window to
either (a CUDA window as the region's ``DeviceWindow``, or as bytes copied to the host).
Statuses and messages are Triton's (``src/shared_memory_manager.cc``). A key that names one of
the server's own objects (``inferd-<pid>-...``: the process link's segments, the run folder)
is refused before anything is opened, and no message names such an object: a client learns
neither whether one exists nor what it is called. It knows nothing of requests, sockets or
models.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from inferd.kernel.sdk.cuda_memory import CudaRegion
from inferd.kernel.sdk.shared_memory import SERVER_OBJECT_PREFIX
from inferd.plugins.shared_memory.cuda import CudaRegistry, refuse_without_gpus
from inferd.protocols.errors import ErrorCode, InferdError, InvalidArgument, NotFound
from inferd.protocols.messages import (
    DeviceWindow,
    SharedMemoryRef,
    SharedMemoryRegionStatus,
    SharedMemoryStatus,
)
from inferd.protocols.tensors import element_size

SHM_ROOT = Path("/dev/shm")
# What the server names the objects it creates itself, ``<prefix><pid>-...``: the process
# link's segments and the run folder. A client that registered one could read or write the
# tensors of other clients' requests as they cross between the server's processes.
_SERVER_OBJECT = re.compile(re.escape(SERVER_OBJECT_PREFIX) + "[0-9]+-")
_RESERVED = f"'{SERVER_OBJECT_PREFIX}<number>-'"


def names_server_object(key: str) -> bool:
    """Whether ``key`` could name one of the server's own objects: any of its path components
    (so ``//inferd-1-...``, ``/./inferd-1-...`` and ``../shm/inferd-1-...`` as well) is named
    as the server names them."""
    return any(_SERVER_OBJECT.match(part) for part in key.split("/"))


def object_name(key: str) -> str | None:
    """The file name under ``/dev/shm`` that ``shm_open(key)`` opens, or ``None`` for a key
    that names no such object (``shm_open`` drops leading slashes; any other slash, and the
    names ``.`` and ``..``, would leave the folder)."""
    name = key.lstrip("/")
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        return None
    return name


def mapping_window(offset: int, byte_size: int, granularity: int) -> tuple[int, int, int]:
    """(file offset, length, start of the window in the mapping) that map ``byte_size`` bytes
    from ``offset``: mmap offsets must be multiples of the allocation granularity."""
    start = offset - offset % granularity
    return start, offset - start + byte_size, offset - start


def fits(offset: int, byte_size: int, size: int) -> bool:
    """Whether ``byte_size`` bytes from ``offset`` lie within ``size`` bytes."""
    return offset >= 0 and byte_size >= 0 and offset + byte_size <= size


@dataclass(frozen=True, slots=True)
class Region:
    """One registered window of a shared-memory object."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap
    start: int  # where the window begins in ``mapping``

    def view(self, offset: int, byte_size: int) -> memoryview:
        """``byte_size`` bytes from ``offset`` in the window; the caller checked the bounds."""
        begin = self.start + offset
        return memoryview(self.mapping)[begin : begin + byte_size]

    def release(self) -> None:
        """Unmap now if nothing views the mapping; otherwise the last view's release unmaps
        it (the mapping is freed with its last reference), which is what keeps a request
        that is still running safe."""
        try:
            self.mapping.close()
        except BufferError:
            pass


def _already_registered(name: str) -> InferdError:
    return InferdError.from_code(
        ErrorCode.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
    )


class SharedMemoryRegistry:
    """The regions registered by name. Not thread-safe: the data plane uses it from the
    event loop only."""

    def __init__(self, root: Path = SHM_ROOT, cuda: CudaRegistry | None = None) -> None:
        self._root = root
        self._regions: dict[str, Region] = {}
        self.cuda = cuda if cuda is not None else CudaRegistry()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if not name:
            raise InvalidArgument(
                "'region name' is necessary to register system shared memory region"
            )
        if names_server_object(key):
            # Before the object is opened, and without the key: whether it exists, and its
            # name, stay the server's.
            raise InvalidArgument(
                f"cannot register shared memory region '{name}': its key names one of the "
                f"server's own shared memory objects (keys beginning with {_RESERVED} are "
                "reserved)")
        if name in self._regions or name in self.cuda.regions:
            raise _already_registered(name)
        file_name = object_name(key)
        if file_name is None:
            raise InvalidArgument(f"Unable to open shared memory region: '{key}'")
        try:
            # O_NOFOLLOW: anyone may put a link in /dev/shm; it must not map a file elsewhere.
            descriptor = os.open(
                self._root / file_name, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
            )
        except OSError:
            raise InvalidArgument(f"Unable to open shared memory region: '{key}'") from None
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidArgument(f"Unable to open shared memory region: '{key}'")
            size = info.st_size
            # An empty window cannot be mapped, and one past the end would fault on access.
            if byte_size <= 0 or not fits(offset, byte_size, size):
                raise InvalidArgument(
                    f"failed to register shared memory region '{name}': invalid args"
                )
            file_offset, length, start = mapping_window(
                offset, byte_size, mmap.ALLOCATIONGRANULARITY
            )
            try:
                mapping = mmap.mmap(descriptor, length, offset=file_offset)
            except (OSError, ValueError) as error:
                raise InvalidArgument(
                    f"failed to register shared memory region '{name}': {error}"
                ) from None
        finally:
            os.close(descriptor)
        self._regions[name] = Region(name, key, offset, byte_size, mapping, start)

    def register_cuda(self, name: str, handle: bytes, device_id: int, byte_size: int) -> None:
        """A CUDA region from a client's IPC handle (refused where the server sees no GPU)."""
        if not name:
            raise InvalidArgument(
                "'region name' is necessary to register cuda shared memory region"
            )
        if self.cuda.runtime() is None:
            raise refuse_without_gpus(name)
        if name in self._regions or name in self.cuda.regions:
            raise _already_registered(name)
        self.cuda.register(name, handle, device_id, byte_size)

    def unregister(self, name: str = "", memory: str = "system") -> None:
        """Unregister ``name`` if it is a region of ``memory`` (an unknown name, or one of the
        other kind, is not an error: Triton leaves it), or every region of ``memory``."""
        if memory == "cuda":
            self.cuda.unregister(name)
            return
        names = [name] if name else list(self._regions)
        for each in names:
            region = self._regions.pop(each, None)
            if region is not None:
                region.release()

    def status(self, name: str = "", memory: str = "system") -> SharedMemoryStatus:
        if name:
            self._check_kind(name, memory)
        if memory == "cuda":
            cuda = [self.cuda.region(name)] if name else list(self.cuda.regions.values())
            return SharedMemoryStatus(tuple(
                SharedMemoryRegionStatus(r.name, "", 0, r.byte_size, r.device_id) for r in cuda
            ))
        if name:
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find system shared memory region: '{name}'")
            regions = [region]
        else:
            regions = [self._regions[key] for key in sorted(self._regions)]
        return SharedMemoryStatus(
            tuple(SharedMemoryRegionStatus(r.name, r.key, r.offset, r.byte_size) for r in regions)
        )

    def _check_kind(self, name: str, memory: str) -> None:
        if memory == "system" and name in self.cuda.regions:
            raise NotFound(f"The region named '{name}' is registered as CUDA shared memory, "
                           "not system shared memory")
        if memory == "cuda" and name in self._regions:
            raise NotFound(f"The region named '{name}' is registered as system shared memory, "
                           "not CUDA shared memory")

    def view(self, location: SharedMemoryRef) -> memoryview:
        """The bytes ``location`` names, checked against its region: a view of a system
        region's mapping, or a CUDA region's bytes copied to the host (read-only)."""
        cuda = self.cuda.regions.get(location.region)
        if cuda is not None:
            self._check_window(location, cuda.byte_size)
            return cuda.read(location.offset, location.byte_size)
        return self._system_view(location)

    def cuda_window(self, location: SharedMemoryRef) -> tuple[CudaRegion, DeviceWindow] | None:
        """The CUDA region ``location`` names and its window there, checked; ``None`` for a
        system region (or none: ``view``/``writer`` say which error)."""
        cuda = self.cuda.regions.get(location.region)
        if cuda is None:
            return None
        self._check_window(location, cuda.byte_size)
        return cuda, cuda.window(location.offset, location.byte_size)

    def writer(self, location: SharedMemoryRef) -> Callable[[memoryview], None]:
        """What writes an output's bytes (no more than ``location.byte_size``) where
        ``location`` names, checked now: the write itself comes after the inference, and the
        writer keeps the region's memory alive until then, even through an unregister."""
        cuda = self.cuda.regions.get(location.region)
        if cuda is not None:
            self._check_window(location, cuda.byte_size)
            offset = location.offset

            def write_device(data: memoryview) -> None:
                cuda.write(offset, data)

            return write_device
        window = self._system_view(location)

        def write_mapping(data: memoryview) -> None:
            window[: data.nbytes] = data

        return write_mapping

    def _system_view(self, location: SharedMemoryRef) -> memoryview:
        region = self._regions.get(location.region)
        if region is None:
            raise NotFound(f"Unable to find shared memory region: '{location.region}'")
        self._check_window(location, region.byte_size)
        return region.view(location.offset, location.byte_size)

    @staticmethod
    def _check_window(location: SharedMemoryRef, size: int) -> None:
        if not fits(location.offset, location.byte_size, size):
            raise InvalidArgument(
                f"Invalid offset + byte size for shared memory region: '{location.region}'"
            )

    def close(self) -> None:
        self.unregister()
        self.cuda.close()

    def __len__(self) -> int:
        return len(self._regions)


def check_input_size(name: str, datatype: str, shape: tuple[int, ...], byte_size: int,
                     model: str, request_id: str) -> None:
    """An input in shared memory holds exactly its tensor's bytes (BYTES elements vary in
    size: their buffer is parsed instead), in the words of Triton's core."""
    size = element_size(datatype)
    if size is None:
        return
    expected = math.prod(shape) * size
    if byte_size != expected:
        raise InvalidArgument(
            f"[request id: {request_id or '<id_unknown>'}] input byte size mismatch for input "
            f"'{name}' for model '{model}'. Expected {expected}, got {byte_size}")

