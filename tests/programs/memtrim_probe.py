"""How much of a 4 MB tensor, allocated after a freed 16 MB one, glibc serves from mmap:
``inside`` the ``large_blocks_mmapped`` block, ``after`` it, or ``plain`` (never in it).
Prints the growth of mmapped bytes. Run by tests/test_memtrim.py, one fresh process per mode:
the threshold is process-wide and only ever raised.
"""

import ctypes
import ctypes.util
import sys

import torch

from swarmnode.train.memtrim import large_blocks_mmapped


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = MallInfo2


def mmapped_growth() -> int:
    big = torch.ones(4 * 2**20)  # 16 MB, freed at once: glibc raises its threshold to 16 MB
    del big
    before = libc.mallinfo2().hblkhd
    small = torch.ones(2**20)  # 4 MB: from the heaps unless the threshold is held low
    growth = libc.mallinfo2().hblkhd - before
    del small
    return growth


if sys.argv[1] == "inside":
    with large_blocks_mmapped():
        print(mmapped_growth())
elif sys.argv[1] == "after":
    with large_blocks_mmapped():
        pass
    print(mmapped_growth())
else:
    print(mmapped_growth())
