"""oneDNN in torch's CPU build: how many compiled matrix-product kernels it keeps.

torch runs a CPU's bf16 matrix products through oneDNN (via ideep), and both keep every
kernel they compile, one per matrix shape, in a cache of 1,024 entries each: oneDNN's
primitive cache (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``, oneDNN's documented setting) and
ideep's (``LRU_CACHE_CAPACITY``). A model whose batch shrinks as its rows end meets a new
shape at every size, and 256 shapes of one linear layer grew a process's heap by 153 MB
with both caches at 1,024 and by 9 MB with both at 16 (torch 2.13.0, AMX). fp32 products
go to the BLAS and are not cached.

Contract (checked on the torch releases in :data:`CHECKED_ON`): each library reads its
variable from the environment once, when it creates its first kernel, so
:func:`cap_kernel_caches` works only before the process's first bf16 product; a capacity
of 0 crashes ideep, so the cap is at least 1. :func:`bf16_matmul_supported` uses
``torch.cpu.get_capabilities`` (public since torch 2.13). ``tests/test_onednn.py`` checks
both on the installed torch. Outside :data:`TORCH_RANGE` the caches may be read another
way, so :func:`caps_checked` is false there and ``dtype = "auto"`` keeps fp32 on CPUs: the
range bounds that choice, not the torch ``pyproject.toml`` admits.
"""

from __future__ import annotations

import os

import torch
from packaging.version import Version

TORCH_RANGE = (Version("2.13"), Version("2.14"))  # lowest admitted, first one not admitted
CHECKED_ON = ("2.13.0",)
VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def caps_checked() -> bool:
    """Whether the installed torch lies in :data:`TORCH_RANGE` (where the caps are known to work)."""
    low, high = TORCH_RANGE
    return low <= Version(Version(torch.__version__).base_version) < high


def cap_kernel_caches(capacity: int) -> dict[str, str]:
    """Bound both kernel caches to ``capacity`` kernels (at least 1), unless the environment
    already sets them (a user's choice stands). Call before the process's first bf16 product on
    a CPU; later it changes nothing. Returns the settings in force."""
    if capacity < 1:
        raise ValueError(f"a kernel cache needs room for at least 1 kernel, not {capacity}")
    for name in VARIABLES:
        os.environ.setdefault(name, str(capacity))
    return {name: os.environ[name] for name in VARIABLES}


def bf16_matmul_supported() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AMX tiles: Intel Sapphire Rapids
    and later), as torch detects it. False where torch cannot say."""
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    if capabilities is None:
        return False
    return bool(capabilities().get("amx_bf16", False))
