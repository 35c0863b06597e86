"""reasoning-gym, imported so that generating questions prints nothing and imports no plotting library.

Two of its behaviours would put lines in a node's terminal that are neither log lines nor
progress bars:

- the brainfuck family (``bf``) compiles each program with a bundled compiler whose
  optimiser prints a dot per pass, with no newline (``print(".", end="")`` in
  ``reasoning_gym.code.contrib.bfit.Compiler.Optimizer.optimize``), so dots ran into the log.
  :func:`factory` gives that module a ``print`` of its own that drops the dots and sends
  anything else it prints to this module's debug log.
- importing the package imports ``cellpylib`` (for the Game of Life families), which imports
  ``matplotlib.pyplot``: 20-40 MB of memory and, on a fresh machine, matplotlib building its
  font cache ("generated new fontManager") in a process that draws nothing. :func:`factory`
  puts a placeholder for ``cellpylib`` in ``sys.modules`` first that imports the real one on
  its first attribute use, so only a node that generates those families imports it.

Both were checked on the releases in :data:`CHECKED_ON`; ``pyproject.toml`` admits exactly
:data:`CHECKED_RANGE`. On another layout either step does nothing and questions still generate.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import types
from typing import Any

log = logging.getLogger(__name__)

CHECKED_RANGE = ">=0.1.23,<0.2"
CHECKED_ON = ("0.1.23", "0.1.25")
_BF_OPTIMIZER = "reasoning_gym.code.contrib.bfit.Compiler.Optimizer"
_DEFERRED = "cellpylib"


class _Deferred(types.ModuleType):
    """Stands in ``sys.modules`` for a module until an attribute of it is first read."""

    def __getattr__(self, attr: str) -> Any:
        real = self.__dict__.get("_real")
        if real is None:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
            self.__dict__["_real"] = real
        return getattr(real, attr)


def _quiet_print(*args: Any, sep: str | None = " ", end: str | None = "\n", **_: Any) -> None:
    text = (" " if sep is None else sep).join(str(a) for a in args)
    if text.strip(". "):
        log.debug("bf compiler: %s", text)


@functools.cache
def factory() -> types.ModuleType:
    """``reasoning_gym.factory`` (``DATASETS``, ``create_dataset``, ``create_curriculum``), imported
    as described in the module docstring. Every import of reasoning-gym in swarmnode goes through here."""
    if _DEFERRED not in sys.modules:
        sys.modules[_DEFERRED] = _Deferred(_DEFERRED)
    import reasoning_gym.factory

    try:
        optimizer = importlib.import_module(_BF_OPTIMIZER)
    except ImportError:
        optimizer = None
    if optimizer is not None and callable(getattr(optimizer, "optimize", None)):
        setattr(optimizer, "print", _quiet_print)  # shadows the builtin for that module alone
    return reasoning_gym.factory
