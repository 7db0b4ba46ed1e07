"""Large tensors between the processes of one server, through POSIX shared memory.

On the process link (``inferd.kernel.runtime.process_link.ProcessLink``) a tensor of at least
``threshold`` bytes does not travel as a ZeroMQ frame. The sender copies its bytes once into a
segment of its own under ``/dev/shm`` and the message carries only ``(segment name, byte
count)``; the receiver maps the segment read-only and builds the tensor over the mapping. A
frame would be copied twice by the kernel and cross the socket in many system calls; a segment
is one ``memcpy`` and, once both sides have mapped it, no system call at all.

Ownership is simple and strict:

- A segment belongs to the process that created it (``SegmentPool``) for its whole life: that
  process alone writes it and unlinks it. It is lent in one message at a time and reused only
  once the receiver gives it back (``ReleaseSegments``), which the receiver does when the last
  array over it is garbage (``weakref.finalize`` on the block, ``SegmentViews``), or when the
  receiver's process is gone (``SegmentPool.forget``).
- Names are ``inferd-<server pid>-<owner pid>-<n>``, never reused. So whoever outlives a
  process can find what it left: the server unlinks a dead executor's segments
  (``remove_orphans``), an executor whose server died unlinks the server's, and every server
  start unlinks those of servers that are gone (``remove_stale``), like the run folders.
- Never ``multiprocessing.shared_memory``: its resource tracker is a process of its own that
  unlinks segments it believes leaked, which here would be segments still lent.

``posix_fallocate`` reserves a segment's pages when it is created: a full ``/dev/shm`` is
then an error at creation (the tensor travels as a frame) instead of a ``SIGBUS`` at the first
write. A pool holds at most ``capacity`` bytes; past it, tensors travel as frames.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import mmap
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.kernel.runtime.run_folder import process_alive
from inferd.protocols.errors import InvalidArgument

log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
PREFIX = "inferd-"
DEFAULT_THRESHOLD = 64 * 1024
DEFAULT_CAPACITY = 256 * 1024 * 1024
_SMALLEST_SEGMENT = 64 * 1024
_SEGMENT = re.compile(re.escape(PREFIX) + r"([0-9]+)-([0-9]+)-([0-9]+)")
_numbers = itertools.count()  # one sequence for every pool of the process: names never repeat

Token = tuple[str, int]  # (segment name, byte count), what a message carries


def segment_size(nbytes: int) -> int:
    """The size of the segment a tensor of ``nbytes`` goes in: the next power of two, so a
    few sizes serve every tensor and a freed segment fits the next tensor of its class."""
    return max(_SMALLEST_SEGMENT, 1 << (nbytes - 1).bit_length())


@dataclass(eq=False, slots=True)
class _Segment:
    name: str
    size: int
    memory: mmap.mmap


class SegmentPool:
    """The segments this process owns: lent to a peer in outgoing messages, taken back when
    the peer releases them or its process goes. Used on the event loop's thread only."""

    def __init__(self, server_pid: int, *, threshold: int, capacity: int) -> None:
        self.threshold = threshold
        self.capacity = capacity
        self.enabled = threshold > 0 and capacity > 0 and SHM_DIR.is_dir()
        self._prefix = f"{PREFIX}{server_pid}-{os.getpid()}-"
        self._free: dict[int, list[_Segment]] = {}
        self._lent: dict[str, dict[str, _Segment]] = {}  # peer -> segment name -> segment
        self._bytes = 0
        self._warned_full = False

    @property
    def segment_count(self) -> int:
        return sum(map(len, self._free.values())) + sum(map(len, self._lent.values()))

    def spill(self, peer: str, buffer: memoryview | bytes) -> Token | None:
        """Copy ``buffer`` into a free segment lent to ``peer``; ``None`` when it is smaller
        than the threshold or no segment can be had (it then travels as a frame)."""
        nbytes = buffer.nbytes if isinstance(buffer, memoryview) else len(buffer)
        if not self.enabled or nbytes < self.threshold:
            return None
        segment = self._take(segment_size(nbytes))
        if segment is None:
            return None
        segment.memory[:nbytes] = buffer
        self._lent.setdefault(peer, {})[segment.name] = segment
        return segment.name, nbytes

    def release(self, peer: str, names: Iterable[str]) -> None:
        lent = self._lent.get(peer, {})
        for name in names:
            segment = lent.pop(name, None)
            if segment is not None:
                self._free.setdefault(segment.size, []).append(segment)

    def forget(self, peer: str) -> None:
        """``peer``'s process is gone: what it held is free again."""
        self.release(peer, list(self._lent.get(peer, ())))
        self._lent.pop(peer, None)

    def close(self) -> None:
        """Unmap and unlink every segment (views the peers still hold stay valid)."""
        segments = [s for free in self._free.values() for s in free]
        segments += [s for lent in self._lent.values() for s in lent.values()]
        self._free.clear()
        self._lent.clear()
        self._bytes = 0
        for segment in segments:
            _unlink(segment.name)
            try:
                segment.memory.close()
            except BufferError:  # a send still holds a view: the mapping goes with it
                pass

    def _take(self, size: int) -> _Segment | None:
        free = self._free.get(size)
        if free:
            return free.pop()
        if self._bytes + size > self.capacity:
            if not self._warned_full:
                log.warning("link shared memory is full (%d bytes in segments): large tensors"
                            " travel as frames until segments come back", self._bytes)
                self._warned_full = True
            return None
        name = f"{self._prefix}{next(_numbers)}"
        try:
            memory = _create(name, size)
        except OSError as error:
            log.warning("cannot create shared memory segment %s of %d bytes (%s): large"
                        " tensors travel as frames", name, size, error)
            self.enabled = False
            return None
        self._bytes += size
        return _Segment(name, size, memory)


def _create(name: str, size: int) -> mmap.mmap:
    path = SHM_DIR / name
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.ftruncate(descriptor, size)
        os.posix_fallocate(descriptor, 0, size)
        return mmap.mmap(descriptor, size)
    except BaseException:
        _unlink(name)
        raise
    finally:
        os.close(descriptor)


def _unlink(name: str) -> None:
    try:
        os.unlink(SHM_DIR / name)
    except FileNotFoundError:
        pass


class SegmentViews:
    """Segments of the other processes of this server, mapped read-only, and the releases
    owed to their owners. ``release(peer, names)`` is called on the event loop."""

    def __init__(self, server_pid: int, release: Callable[[str, tuple[str, ...]], None]) -> None:
        self._server_pid = str(server_pid)
        self._release = release
        self._maps: dict[str, dict[str, mmap.mmap]] = {}  # peer -> segment name -> mapping
        self._owed: dict[str, list[str]] = {}
        self._lock = threading.Lock()  # the last view of a block may die on any thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_scheduled = False

    def view(self, peer: str, token: Any) -> np.ndarray:
        """A read-only ``uint8`` array over the bytes ``token`` names; the segment goes back
        to ``peer`` once that array and every array over it are garbage."""
        if (
            type(token) is not tuple or len(token) != 2
            or type(token[0]) is not str or type(token[1]) is not int
        ):
            raise InvalidArgument(f"malformed shared memory reference {token!r}")
        name, nbytes = token
        found = _SEGMENT.fullmatch(name)
        if found is None or found.group(1) != self._server_pid:
            raise InvalidArgument(f"'{name}' is not a shared memory segment of this server")
        maps = self._maps.setdefault(peer, {})
        memory = maps.get(name)
        if memory is None:
            memory = maps[name] = _open(name)
        if not 0 <= nbytes <= len(memory):
            raise InvalidArgument(
                f"shared memory reference to {nbytes} bytes of segment '{name}' of"
                f" {len(memory)} bytes"
            )
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        block = np.frombuffer(memory, np.uint8, count=nbytes)
        weakref.finalize(block, self._dropped, peer, name)
        return block

    def forget(self, peer: str) -> None:
        """``peer``'s process is gone: its mappings are dropped (views alive keep theirs)."""
        self._maps.pop(peer, None)
        with self._lock:
            self._owed.pop(peer, None)

    def _dropped(self, peer: str, name: str) -> None:
        with self._lock:
            self._owed.setdefault(peer, []).append(name)
            if self._flush_scheduled or self._loop is None:
                return
            self._flush_scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._flush)
        except RuntimeError:  # the loop is closed: the process is stopping
            pass

    def _flush(self) -> None:
        with self._lock:
            owed, self._owed = self._owed, {}
            self._flush_scheduled = False
        for peer, names in owed.items():
            self._release(peer, tuple(names))


def _open(name: str) -> mmap.mmap:
    try:
        descriptor = os.open(SHM_DIR / name, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as error:
        raise InvalidArgument(f"cannot open shared memory segment '{name}': {error}") from None
    try:
        return mmap.mmap(descriptor, 0, prot=mmap.PROT_READ)
    finally:
        os.close(descriptor)


# ------------------------------------------------------------------------- clean-up


def remove_orphans(server_pid: int) -> list[str]:
    """Unlink the segments of this server's processes that are gone (an executor that died),
    and return their names."""
    return _remove(lambda server, owner: server == server_pid and not process_alive(owner))


def remove_server_segments(server_pid: int) -> list[str]:
    """Unlink every segment of the server ``server_pid`` (it stopped or died)."""
    return _remove(lambda server, owner: server == server_pid)


def remove_stale() -> list[str]:
    """Unlink the segments of servers that are gone (killed before they could)."""
    return _remove(lambda server, owner: not process_alive(server))


def _remove(doomed: Callable[[int, int], bool]) -> list[str]:
    removed: list[str] = []
    try:
        entries = list(os.scandir(SHM_DIR))
    except OSError:
        return removed
    uid = os.getuid()
    for entry in entries:
        found = _SEGMENT.fullmatch(entry.name)
        if found is None or not doomed(int(found.group(1)), int(found.group(2))):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(entry.name)
    return removed



def server_segment_bytes(server_pid: int) -> tuple[int, int]:
    """(segments, bytes) the processes of the server ``server_pid`` hold now (its metrics)."""
    count = total = 0
    try:
        entries = list(os.scandir(SHM_DIR))
    except OSError:
        return 0, 0
    for entry in entries:
        found = _SEGMENT.fullmatch(entry.name)
        if found is None or int(found.group(1)) != server_pid:
            continue
        try:
            total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue  # released meanwhile
        count += 1
    return count, total
