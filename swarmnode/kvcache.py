"""A read-only KV cache for training a group's completions after their shared prompt.

The training pass of a group's completions attends to one prompt. Its keys and values (one
row, carrying gradients) are broadcast to every row without copies, and nothing is ever
stored: the cache is read-only, so a layer can be recomputed under activation
checkpointing and see exactly the same inputs.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


class _PrefixLayer(DynamicLayer):
    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.keys, self.values = keys, values
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        rows = key_states.shape[0]
        return (torch.cat([self.keys.expand(rows, -1, -1, -1), key_states], dim=-2),
                torch.cat([self.values.expand(rows, -1, -1, -1), value_states], dim=-2))

    def get_seq_length(self) -> int:
        return self.keys.shape[-2]


def prefix_cache(prompt_cache: Cache) -> Cache:
    """A read-only cache that puts ``prompt_cache``'s one row in front of every row of a batch."""
    return Cache(layers=[_PrefixLayer(layer.keys, layer.values) for layer in prompt_cache.layers])
