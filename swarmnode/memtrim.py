"""Keep a round's freed memory from staying resident (glibc; elsewhere these do nothing).

Two glibc behaviours make a PyTorch process on CPU hold far more memory than it uses:

- glibc serves blocks above its mmap threshold with their own ``mmap`` (unmapped when
  freed), the rest from its heaps. Each time an mmapped block is freed it raises that
  threshold to the block's size, up to 32 MB, so after the first few tensors almost every
  activation comes from the heaps, which fragment and cannot shrink. A training step at the
  default sizes (8 completions x 256 tokens after a 251-token prompt) then peaked at
  4.4 GB RSS; with the threshold pinned at 128 KiB (pinning it also stops the raising) it
  peaked at 1.6 GB. :func:`pin_mmap_threshold` does that, once per process.
- Freed heap blocks stay resident. ``malloc_trim(0)`` (:func:`release_free_memory`, a few
  milliseconds) returns them between the phases of a round, so the next phase does not
  stack its own peak on top.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


_M_MMAP_THRESHOLD = -3  # mallopt's parameter number, from glibc's malloc.h
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value


@functools.lru_cache(maxsize=None)
def _glibc(function: str):
    """``function`` of glibc, or None where the C library has no such function."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return getattr(libc, function, None) if libc is not None else None


@functools.lru_cache(maxsize=1)
def pin_mmap_threshold() -> None:
    """Serve every block of ``MMAP_THRESHOLD_BYTES`` or more with its own mmap, for good.

    Call before the model loads; later calls do nothing. The price is zero-filled fresh pages
    for each large tensor (see docs/performance.md for what it costs a round).
    """
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def release_free_memory() -> None:
    """Return free heap pages to the OS (glibc); a no-op where that is not available."""
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)
