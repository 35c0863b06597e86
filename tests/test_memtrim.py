"""Inside ``large_blocks_mmapped`` large tensors get their own mmap, never the fragmenting heaps;
after ``hold_free_heap_low`` a freed heap top goes back to the OS.

Each glibc case runs in a fresh process (tests/programs/memtrim_probe.py,
trim_threshold_probe.py): the thresholds are process-wide and only ever raised.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest

from programs import output
from swarmnode.compat import glibc
from swarmnode.train.memtrim import (
    TRIM_THRESHOLD_BYTES,
    hold_free_heap_low,
    large_blocks_mmapped,
    release_free_memory,
)


def _mmapped_growth(mode: str) -> int:
    return int(output("memtrim_probe", mode).splitlines()[-1])


def _has_mallinfo2() -> bool:
    name = ctypes.util.find_library("c")
    return bool(name) and hasattr(ctypes.CDLL(name), "mallinfo2")


@pytest.mark.slow
@pytest.mark.skipif(not _has_mallinfo2(), reason="mallinfo2 is glibc >= 2.33 only; elsewhere pinning is a no-op")
def test_a_4_mb_tensor_after_a_freed_16_mb_one_is_mmapped_only_inside_the_block():
    assert _mmapped_growth("inside") >= 4 * 2**20
    assert _mmapped_growth("after") < 4 * 2**20
    assert _mmapped_growth("plain") < 4 * 2**20  # the glibc behaviour the block exists for


def _kept_after_a_freed_12_mb_block(mode: str) -> tuple[str, int]:
    accepted, keepcost = output("trim_threshold_probe", mode).splitlines()[-2:]
    return accepted, int(keepcost)


@pytest.mark.slow
@pytest.mark.skipif(not _has_mallinfo2(), reason="mallinfo2 is glibc >= 2.33 only; elsewhere the setting is a no-op")
def test_a_held_trim_threshold_returns_a_freed_heap_top_that_glibc_would_keep():
    accepted, kept = _kept_after_a_freed_12_mb_block("held")
    assert accepted == "True"
    assert kept <= TRIM_THRESHOLD_BYTES
    _, kept_plain = _kept_after_a_freed_12_mb_block("plain")
    assert kept_plain >= 12 * 2**20  # the glibc behaviour the setting exists for


def test_the_settings_do_nothing_and_say_so_without_glibc(monkeypatch):
    monkeypatch.setattr(glibc, "_function", lambda name: None)
    assert hold_free_heap_low() is False
    assert glibc.malloc_trim() is False
    assert glibc.version() is None
    with large_blocks_mmapped():
        release_free_memory()


def test_glibc_is_named_by_its_release_where_it_runs():
    if not _has_mallinfo2():
        pytest.skip("not glibc >= 2.33")
    assert glibc.version().split(".")[0] == "2"
