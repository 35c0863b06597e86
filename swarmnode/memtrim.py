"""Give freed heap memory back to the operating system between the phases of a round.

glibc keeps freed blocks in its heaps for reuse; after a phase that allocated and freed
hundreds of MB of differently sized tensors (generation, a training step) the process's
resident memory stays near its peak even though the memory is free, and the next phase
stacks its own peak on top. ``malloc_trim(0)`` returns those free pages; it takes a few
milliseconds. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return libc.malloc_trim if libc is not None and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def release_free_memory() -> None:
    """Return free heap pages to the OS (glibc); a no-op where that is not available."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
