"""Keep a round's freed memory from staying resident (glibc; elsewhere these do nothing).

Two glibc behaviours make a PyTorch process on CPU hold far more memory than it uses:

- glibc serves blocks above its mmap threshold with their own ``mmap`` (unmapped when
  freed), the rest from its heaps. Each time an mmapped block is freed it raises that
  threshold to the block's size, up to 32 MiB, so after the first few tensors almost every
  activation comes from the heaps, which fragment. A training step at the default sizes (8
  completions x 256 tokens after a 251-token prompt) then peaked at 4.4 GB RSS; with the
  threshold held at 128 KiB, 1.6 GB. Fresh mmapped pages are zero-filled, though, which
  made generation (many short-lived per-step tensors) 1.28x slower, so
  :func:`large_blocks_mmapped` holds the low threshold around training only.
- Freed heap blocks stay resident. ``malloc_trim(0)`` (:func:`release_free_memory`, a few
  milliseconds) returns them between the phases of a round, so the next phase does not
  stack its own peak on top, and every few decoding steps, whose keys and values grow by
  concatenation and leave the blocks they outgrew behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
from typing import Iterator

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number, from glibc's malloc.h
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value
HEAP_THRESHOLD_BYTES = 32 * 2**20  # the value glibc's raising ends at on 64-bit systems


@functools.lru_cache(maxsize=None)
def _glibc(function: str):
    """``function`` of glibc, or None where the C library has no such function."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return getattr(libc, function, None) if libc is not None else None


@contextlib.contextmanager
def large_blocks_mmapped() -> Iterator[None]:
    """Inside the block, every allocation of ``MMAP_THRESHOLD_BYTES`` or more gets its own mmap.

    On leaving, the threshold is set to ``HEAP_THRESHOLD_BYTES``, where glibc's own raising
    would have taken it (a set threshold is never raised again). Not reentrant across
    threads: the threshold is process-wide.
    """
    mallopt = _glibc("mallopt")
    if mallopt is None:
        yield
        return
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    try:
        yield
    finally:
        mallopt(_M_MMAP_THRESHOLD, HEAP_THRESHOLD_BYTES)


def release_free_memory() -> None:
    """Return free heap pages to the OS (glibc); a no-op where that is not available."""
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)
