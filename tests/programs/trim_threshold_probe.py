"""How much freed memory glibc keeps at the top of the main heap: ``held`` after
:func:`hold_free_heap_low`, ``plain`` without it. Prints the setting's answer (None when
plain), then ``keepcost`` (the top chunk's releasable bytes) after a 12 MB heap block is freed.
Run by tests/test_memtrim.py in a fresh process per mode: the settings are process-wide and
cannot be undone.
"""

import ctypes
import sys

from swarmnode.train.memtrim import hold_free_heap_low


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2

accepted = hold_free_heap_low() if sys.argv[1] == "held" else None
# A freed 16 MB mmapped block, as a model's first tensors: unless the thresholds are held,
# glibc raises its mmap threshold to 16 MB and its trim threshold to 32 MB ...
libc.free(libc.malloc(16 * 2**20))
# ... so a 12 MB block then comes from the heap's top, and stays there, resident, once freed.
libc.free(libc.malloc(12 * 2**20))
print(accepted)
print(libc.mallinfo2().keepcost)
