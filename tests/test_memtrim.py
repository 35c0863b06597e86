"""Inside ``large_blocks_mmapped`` large tensors get their own mmap, never the fragmenting heaps.

Each case runs in a fresh process: the threshold is process-wide and only ever raised.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys

import pytest

_PROBE = """
import ctypes, ctypes.util, sys, torch
from swarmnode.train.memtrim import large_blocks_mmapped

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = MallInfo2
def mmapped_growth():
    big = torch.ones(4 * 2**20)  # 16 MB, freed at once: glibc raises its threshold to 16 MB
    del big
    before = libc.mallinfo2().hblkhd
    x = torch.ones(2**20)  # 4 MB: from the heaps unless the threshold is held low
    return libc.mallinfo2().hblkhd - before

if sys.argv[1] == "inside":
    with large_blocks_mmapped():
        print(mmapped_growth())
elif sys.argv[1] == "after":
    with large_blocks_mmapped():
        pass
    print(mmapped_growth())
else:
    print(mmapped_growth())
"""


def _mmapped_growth(mode: str) -> int:
    proc = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stdout.strip().splitlines()[-1])


def _has_mallinfo2() -> bool:
    name = ctypes.util.find_library("c")
    return bool(name) and hasattr(ctypes.CDLL(name), "mallinfo2")


@pytest.mark.slow
@pytest.mark.skipif(not _has_mallinfo2(), reason="mallinfo2 is glibc >= 2.33 only; elsewhere pinning is a no-op")
def test_a_4_mb_tensor_after_a_freed_16_mb_one_is_mmapped_only_inside_the_block():
    assert _mmapped_growth("inside") >= 4 * 2**20
    assert _mmapped_growth("after") < 4 * 2**20
    assert _mmapped_growth("plain") < 4 * 2**20  # the glibc behaviour the block exists for
