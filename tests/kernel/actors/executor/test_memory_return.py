"""The executor's memory readings and what an unload gives back: a footprint is a growth,
never negative; a GPU figure is None without a GPU reading; the heap is trimmed where glibc is
there; an allocation freed in this process is measured as returned."""

from __future__ import annotations

import ctypes.util
import logging
import sys

import numpy as np
import pytest

from inferd.kernel.actors.executor.memory_return import (
    Footprint,
    ProcessMemory,
    Reading,
    describe,
    give_back,
    trim_heap,
    unloading,
)
from inferd.protocols.messages import VersionUnloaded

MIB = 1 << 20


def test_a_footprint_is_the_growth_of_each_reading_and_never_negative() -> None:
    assert Footprint.between(Reading(100, 10), Reading(160, 40)) == Footprint(60, 30)
    assert Footprint.between(Reading(100, 10), Reading(90, 5)) == Footprint(0, 0)
    assert Footprint.between(Reading(100, None), Reading(160, 40)) == Footprint(60, None)
    assert Footprint.between(Reading(100, 10), Reading(160, None)) == Footprint(60, None)


def test_the_description_names_the_gpu_only_where_it_was_read() -> None:
    assert describe(Footprint(100 * MIB, None)) == "100.0 MiB resident"
    assert describe(Footprint(100 * MIB, 2 * MIB)) == "100.0 MiB resident, 2.0 MiB on the GPU"


def test_the_heap_is_trimmed_where_glibc_is_the_c_library() -> None:
    glibc = sys.platform.startswith("linux") and "libc.so.6" == ctypes.util.find_library("c")
    assert trim_heap() is glibc


def test_a_reading_is_this_process_s_resident_memory() -> None:
    memory = ProcessMemory(with_children=False)
    before = memory.reading()
    held = np.ones(64 * MIB // 8)  # written, so resident
    after = memory.reading()
    assert Footprint.between(before, after).resident >= 48 * MIB
    del held


def test_an_unload_measures_what_it_gave_back_and_logs_it(
        caplog: pytest.LogCaptureFixture) -> None:
    memory = ProcessMemory(with_children=False)
    held = np.ones(64 * MIB // 8)
    before = memory.reading()
    del held  # the model's memory, freed as its instances close
    with caplog.at_level(logging.INFO):
        reply = unloading("m", 3, Footprint(64 * MIB, None), before, memory)
    assert isinstance(reply, VersionUnloaded)
    assert reply.loaded_resident == 64 * MIB and reply.loaded_device is None
    assert reply.returned_resident >= 48 * MIB
    assert "unloaded m version 3: gave back " in caplog.text
    assert "(its load took 64.0 MiB resident)" in caplog.text


def test_giving_back_never_imports_torch() -> None:
    loaded = "torch" in sys.modules
    give_back()
    assert ("torch" in sys.modules) is loaded
