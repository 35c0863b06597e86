"""glibc's malloc, reached through ctypes: ``mallopt`` (set a tuning parameter) and ``malloc_trim``.

No Python module wraps either, and both are the C library's own: on another C library
(macOS, Windows, musl) the functions are absent and every call here does nothing and returns
False. The parameter number is ``malloc.h``'s (``M_MMAP_THRESHOLD`` -3); the behaviour the
callers rely on, including the dynamic thresholds described in ``mallopt(3)``, was checked on
the releases in :data:`CHECKED_ON` (``tests/test_memtrim.py`` checks it wherever it runs). A C
library is not a package ``pyproject.toml`` can bound.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

CHECKED_ON = ("2.36",)  # Debian 12's glibc
M_MMAP_THRESHOLD = -3


@functools.lru_cache(maxsize=None)
def _function(name: str):
    """``name`` of the C library, or None where the library has no such function."""
    path = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(path) if path else None
    except OSError:
        return None
    return getattr(libc, name, None) if libc is not None else None


def mallopt(parameter: int, value: int) -> bool:
    """Set malloc ``parameter`` to ``value``, process-wide; True where glibc accepted it."""
    fn = _function("mallopt")
    return fn is not None and fn(parameter, value) == 1


def malloc_trim() -> bool:
    """Return every free heap page of every arena to the OS; True where glibc released some."""
    fn = _function("malloc_trim")
    return fn is not None and fn(0) == 1
