"""KV caches for training a group's completions after their shared prompt.

The training pass of a group's completions attends to one prompt. The prompt pass writes
its keys and values once (:func:`prompt_cache`); the completion pass broadcasts them (one
row, carrying gradients) to every row without copies and stores nothing
(:func:`prefix_cache`). Both passes can therefore be recomputed layer by layer under
activation checkpointing and see exactly the inputs of their first run.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache

from swarmnode.compat.transformers import CacheLayer, LayeredCache, cache_layers, growing_cache


class _WriteOnceLayer(CacheLayer):
    """Stores the first update; a later one is the backward replay of a checkpointed layer,
    which must attend to exactly what the first run did (its own keys), not to both copies."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.stored():
            self.hold(key_states, value_states)
        return key_states, value_states


class _PrefixLayer(CacheLayer):
    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.hold(keys, values)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        rows = key_states.shape[0]
        keys, values = self.states()
        return (torch.cat([keys.expand(rows, -1, -1, -1), key_states], dim=-2),
                torch.cat([values.expand(rows, -1, -1, -1), value_states], dim=-2))

    def get_seq_length(self) -> int:
        return self.states()[0].shape[-2]


def prompt_cache() -> Cache:
    """An empty cache for one prompt pass, safe to replay under activation checkpointing."""
    return growing_cache(_WriteOnceLayer)


def prefix_cache(prompt_cache: Cache) -> Cache:
    """A read-only cache that puts ``prompt_cache``'s one row in front of every row of a batch."""
    return LayeredCache([_PrefixLayer(*layer.states()) for layer in cache_layers(prompt_cache)])
