"""hivemind's DHT and p2p modules without torch, for the relay's DHT server.

``import hivemind`` runs the package ``__init__`` files, which import torch, its optimizers
and its mixture of experts: hundreds of MB a network-only relay does not need. This module
imports no hivemind at import time (unlike :mod:`.hivemind`), so the relay can call
:func:`import_dht_without_torch` before anything else loads hivemind.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types

# hivemind.utils submodules whose names the DHT and p2p modules import from ``hivemind.utils``.
_UTILS_EXPORTS = ("logging", "serializer", "timed_storage", "asyncio", "nested", "performance_ema")


def import_dht_without_torch() -> None:
    """Make ``hivemind.dht`` and ``hivemind.p2p`` importable without running hivemind's package
    ``__init__`` files, which import torch (hivemind.utils.mpfuture, tensor_descr, moe, optim).

    It registers bare ``hivemind``, ``hivemind.utils`` and ``hivemind.dht`` packages pointing
    at the installed sources, and gives ``hivemind.utils`` the names its torch-free
    submodules export. Contract (checked on 1.1.12, the releases of
    :data:`swarmnode.compat.hivemind.CHECKED_RANGE`): ``hivemind/utils`` and ``hivemind/dht``
    are package directories whose DHT and p2p modules import only the names of
    :data:`_UTILS_EXPORTS` from ``hivemind.utils``. A process that already imported hivemind
    keeps it as it is; one that calls this cannot use ``hivemind.DHT`` afterwards.
    """
    if "hivemind" in sys.modules:
        return
    spec = importlib.util.find_spec("hivemind")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("hivemind is not installed; reinstall swarmnode")
    root = list(spec.submodule_search_locations)[0]
    packages = {}
    for name, sub in (("hivemind", ""), ("hivemind.utils", "utils"), ("hivemind.dht", "dht")):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(root, sub) if sub else root]
        module.__package__ = name
        sys.modules[name] = packages[name] = module
    utils = packages["hivemind.utils"]
    for sub in _UTILS_EXPORTS:
        exported = importlib.import_module(f"hivemind.utils.{sub}")
        for attr in dir(exported):
            if not attr.startswith("_") and not hasattr(utils, attr):
                setattr(utils, attr, getattr(exported, attr))
