"""Inside ``large_blocks_mmapped`` large tensors get their own mmap, never the fragmenting heaps.

Each case runs in a fresh process (tests/programs/memtrim_probe.py): the threshold is
process-wide and only ever raised.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest

from programs import output


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
