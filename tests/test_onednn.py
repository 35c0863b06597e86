"""compat/onednn.py: the bf16 kernel caches' caps, and whether the CPU multiplies bf16 in hardware."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import MappingProxyType

import pytest
import torch
from packaging.version import Version

from swarmnode.compat import onednn


def test_caps_are_set_unless_the_user_set_them_and_never_to_zero(monkeypatch):
    # An environment of the test's own: a cap left in the real one would hold for every later test's bf16 model.
    environ = {"LRU_CACHE_CAPACITY": "100"}
    monkeypatch.setattr(os, "environ", environ)
    assert onednn.cap_kernel_caches(8) == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "8", "LRU_CACHE_CAPACITY": "100"}
    assert environ == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "8", "LRU_CACHE_CAPACITY": "100"}
    with pytest.raises(ValueError, match="at least 1"):
        onednn.cap_kernel_caches(0)


@pytest.mark.parametrize("capabilities,supported", [({"amx_bf16": True, "avx512_bf16": True}, True),
                                                     ({"amx_bf16": False, "avx512_bf16": True}, False),
                                                     ({"architecture": "arm64", "bf16": True}, False)])
def test_bf16_matmul_is_amx(monkeypatch, capabilities, supported):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: MappingProxyType(capabilities), raising=False)
    assert onednn.bf16_matmul_supported() is supported
    monkeypatch.delattr(torch.cpu, "get_capabilities")
    assert onednn.bf16_matmul_supported() is False


def test_the_installed_torch_is_one_the_caps_were_checked_on():
    assert onednn.caps_checked()
    low, high = onednn.TORCH_RANGE
    assert all(low <= Version(v) < high for v in onednn.CHECKED_ON)


_GROWTH = textwrap.dedent("""
    import ctypes, json, sys
    import torch
    from swarmnode.compat import onednn
    if sys.argv[1] != "uncapped":
        onednn.cap_kernel_caches(int(sys.argv[1]))
    libc = ctypes.CDLL("libc.so.6")
    def anon_kb():
        status = open("/proc/self/status").read()
        return int(status.split("RssAnon:")[1].split()[0])
    w, x = torch.randn(1536, 576, dtype=torch.bfloat16), torch.randn(128, 576, dtype=torch.bfloat16)
    torch.nn.functional.linear(x[:1], w)
    libc.malloc_trim(0)
    before = anon_kb()
    for rows in range(128, 0, -1):
        torch.nn.functional.linear(x[:rows], w)
    libc.malloc_trim(0)
    print(json.dumps(anon_kb() - before))
""")


@pytest.mark.slow
@pytest.mark.skipif(not onednn.bf16_matmul_supported(), reason="this CPU has no bf16 matrix hardware")
def test_capped_caches_keep_bf16_kernels_of_a_shrinking_batch_from_piling_up(tmp_path):
    """128 shapes of one bf16 linear layer, in a fresh process each (the caps hold only before the first
    bf16 product): capped at 8 kernels, the heap grows far less than with torch's own caches."""
    script = tmp_path / "growth.py"
    script.write_text(_GROWTH)

    def growth_kb(cap: str) -> int:
        env = {k: v for k, v in os.environ.items() if k not in onednn.VARIABLES}
        out = subprocess.run([sys.executable, str(script), cap], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    capped, uncapped = growth_kb("8"), growth_kb("uncapped")
    assert uncapped > 30_000, uncapped  # the kernels torch keeps: about 0.6 MB a shape here
    assert capped < uncapped / 4, (capped, uncapped)
