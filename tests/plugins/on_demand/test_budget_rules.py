"""The memory budget's pure parts (``inferd.plugins.on_demand.budget_rules``): sizes and budgets
as written on the command line, the device and parameters a config gives, and the choice of
what to unload: the least recently used first, only as many as needed, None when even all of
them would not make room."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc.model_config_pb2 import ModelConfig

from inferd.plugins.on_demand.budget_rules import (
    Candidate,
    choose_evictions,
    declared_bytes,
    device_of,
    format_bytes,
    is_pinned,
    parse_budget,
    parse_size,
)

GIB = 1024**3


def no_total(device: str) -> int | None:
    return None


def test_sizes_in_binary_and_decimal_units() -> None:
    assert parse_size("16GiB") == 16 * GIB
    assert parse_size("500MB") == 500_000_000
    assert parse_size("1048576") == 1048576
    assert parse_size("1.5 KiB") == 1536
    with pytest.raises(ValueError, match="expected a size"):
        parse_size("lots")
    with pytest.raises(ValueError, match="expected a size"):
        parse_size("12 parsecs")


def test_budgets_per_device_and_percentages_of_the_device() -> None:
    assert parse_budget("cpu=16GiB,gpu0=70GiB", no_total) == (("cpu", 16 * GIB),
                                                               ("gpu0", 70 * GIB))
    assert parse_budget("cpu=50%", lambda device: 8 * GIB) == (("cpu", 4 * GIB),)
    for text, problem in (("cpu", "DEVICE=SIZE"), ("tpu0=1GiB", "DEVICE=SIZE"),
                          ("cpu=1GiB,cpu=2GiB", "twice"), ("cpu=150%", "at most 100"),
                          ("gpu0=10%", "not known here"), ("cpu=0", "above 0"),
                          ("", "at least one")):
        with pytest.raises(ValueError, match=problem):
            parse_budget(text, no_total)


def test_format_bytes() -> None:
    assert format_bytes(16 * GIB) == "16 GiB"
    assert format_bytes(250) == "250 B"
    assert format_bytes(1536 * 1024) == "1.5 MiB"


def test_a_configs_device_pin_and_declared_size() -> None:
    config = ModelConfig()
    assert (device_of(config), is_pinned(config), declared_bytes(config)) == ("cpu", False, None)
    group = config.instance_group.add()
    group.kind = group.KIND_GPU
    group.gpus.append(1)
    config.parameters["INFERD_PIN"].string_value = "true"
    config.parameters["INFERD_MEMORY_BYTES"].string_value = "2GiB"
    assert (device_of(config), is_pinned(config), declared_bytes(config)) == ("gpu1", True,
                                                                              2 * GIB)


def test_the_least_recently_used_go_first_and_only_as_many_as_needed() -> None:
    old, middle, new = (Candidate("old", 100, 1), Candidate("middle", 100, 2),
                        Candidate("new", 100, 3))
    assert choose_evictions(50, 300, 200, [new, old, middle]) == []
    assert choose_evictions(100, 300, 300, [new, old, middle]) == [old]
    assert choose_evictions(150, 300, 300, [new, old, middle]) == [old, middle]
    assert choose_evictions(400, 300, 300, [new, old, middle]) is None


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 100)), max_size=8),
       st.integers(0, 2000), st.integers(1, 3000))
def test_what_is_chosen_makes_room_and_is_a_prefix_of_the_lru_order(
        held: list[tuple[int, int]], need: int, budget: int) -> None:
    candidates = [Candidate(f"m{i}", size, last) for i, (size, last) in enumerate(held)]
    used = sum(size for size, _ in held)
    chosen = choose_evictions(need, budget, used, candidates)
    order = sorted(candidates, key=lambda c: (c.last_used_ms, c.model))
    if chosen is None:
        assert need > budget
    else:
        assert chosen == order[:len(chosen)]
        assert used - sum(c.held for c in chosen) + need <= budget
