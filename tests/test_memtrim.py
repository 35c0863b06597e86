"""Inside ``large_blocks_mmapped`` large tensors get their own mmap, never the fragmenting heaps.

Each glibc case runs in a fresh process (tests/programs/memtrim_probe.py): the threshold is
process-wide and only ever raised. Elsewhere every call is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest

from programs import output
from swarmnode.compat import glibc
from swarmnode.train.memtrim import MMAP_THRESHOLD_BYTES, large_blocks_mmapped, release_free_memory


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



def test_the_calls_do_nothing_and_say_so_without_glibc(monkeypatch):
    monkeypatch.setattr(glibc, "_function", lambda name: None)
    assert glibc.mallopt(glibc.M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) is False
    assert glibc.malloc_trim() is False
    with large_blocks_mmapped():
        release_free_memory()
