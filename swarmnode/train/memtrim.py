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
  stack its own peak on top, and every few decoding steps, whose per-step tensors leave
  free blocks behind.

What else glibc's allocator leaves at a round's peak, and the settings tried against it
(arenas, trim threshold): docs/performance.md, memory: glibc's allocator at the peak.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from swarmnode.compat.glibc import M_MMAP_THRESHOLD, malloc_trim, mallopt

MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value
HEAP_THRESHOLD_BYTES = 32 * 2**20  # the value glibc's raising ends at on 64-bit systems


@contextlib.contextmanager
def large_blocks_mmapped() -> Iterator[None]:
    """Inside the block, every allocation of ``MMAP_THRESHOLD_BYTES`` or more gets its own mmap.

    On leaving, the threshold is set to ``HEAP_THRESHOLD_BYTES``, where glibc's own raising
    would have taken it (a set threshold is never raised again). Not reentrant across
    threads: the threshold is process-wide.
    """
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    try:
        yield
    finally:
        mallopt(M_MMAP_THRESHOLD, HEAP_THRESHOLD_BYTES)


def release_free_memory() -> None:
    """Return free heap pages to the OS (glibc); a no-op where that is not available."""
    malloc_trim()
