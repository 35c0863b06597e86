"""Sampling with the adapter added into the weights it adapts, on CUDA.

On a GPU, decoding a model this small is bound by per-operation overhead, not by the card:
every adapted linear layer runs its base product, the adapter's two products, two casts and
an add, several kernels where one would do (on an H200, peft's LoRA wrappers took 7.6 s of a
19.5 s Qwen2.5-Coder-0.5B round; docs/experiments/qwen-cuda). Nothing trains while sampling,
so the active adapter is added into the adapted weights (peft's ``merge_adapter``) for the
batch and taken out after. Taking it out by subtraction leaves bf16 rounding behind, round
after round, so the weights as they were are kept and copied back: the base stays bit for bit
what was loaded. The copy costs the adapted weights' size once more in device memory, which is
why this is for CUDA only: on a CPU the weights are mapped from the model file, and a laptop
would pay the copy in resident memory for little time (there the products dominate).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def merges_on(device: torch.device) -> bool:
    """Whether sampling on ``device`` merges the adapter (see the module's docstring)."""
    return device.type == "cuda"


@contextlib.contextmanager
def adapter_merged(model, enabled: bool = True) -> Iterator[None]:
    """Within the block ``model`` (a peft model) computes with its active adapter merged into
    the adapted weights; on leaving, those weights are again exactly the ones before and the
    adapter is applied apart, as training needs. ``enabled=False`` changes nothing."""
    if not enabled:
        yield
        return
    from peft.tuners.tuners_utils import BaseTunerLayer

    weights = [_base_weight(m) for m in model.modules() if isinstance(m, BaseTunerLayer)]
    kept = [w.detach().clone() for w in weights]
    model.merge_adapter()
    try:
        yield
    finally:
        model.unmerge_adapter()
        with torch.no_grad():
            for weight, before in zip(weights, kept):
                weight.copy_(before)


def _base_weight(layer) -> torch.Tensor:
    weight = layer.get_base_layer().weight
    assert isinstance(weight, torch.Tensor), "a LoRA layer adapts a layer with a weight"
    return weight
