"""Decoding attention that keeps one copy of each prompt's keys and values for its n rows.

A GRPO rollout decodes n rows per prompt. The default KV cache holds a copy of the prompt's
keys and values in every row: with SmolLM2-135M (46 KB per token) and a 251-token prompt,
64 rows hold 740 MB of identical prompt states. Here the cache keeps the prompts' states
once ([prompts, kv heads, P, d]) plus each row's own generated part, and the attention of
a decoding step scores a row's query against its prompt's shared states and its own
states in one softmax. Prompt padding (left) is masked with a per-prompt bias.

Sliding-window layers (Gemma 3) read only the keys inside their window: every row of a
decoding step sits at the same index of the (left-padded) sequence, so the window is one
slice of the prompt's states and one of the row's own. Grouped-query attention (Qwen2,
SmolLM2) scores each key/value head's query heads together against that head's states.

Used by :func:`swarmnode.train.sampler.sample` for the decoding steps only (one query token per
row); the prefill runs with the model's own attention. Models with other kinds of layers, or
with soft-capped attention scores, keep the ordinary cache (:func:`unsupported_reason`).
"""

from __future__ import annotations

import contextlib
import contextvars
import mmap
from collections.abc import Iterator

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache

from swarmnode.compat.transformers import (
    CacheLayer,
    LayeredCache,
    attention_swapped,
    cache_layers,
    group_query_heads,
    layer_index,
    ungroup_query_heads,
)

NAME = "swarmnode_shared_prefix"
_ACTIVE: contextvars.ContextVar[SharedPrefixCache] = contextvars.ContextVar("swarmnode_shared_prefix_cache")


# Decoder layer kinds whose decoding attention :func:`_attention` computes exactly.
LAYER_TYPES = ("full_attention", "sliding_attention")


def unsupported_reason(config) -> str | None:
    """None when :func:`_attention` computes every decoder layer of ``config``'s model exactly;
    otherwise why not, in words for the log."""
    text = config.get_text_config(decoder=True)
    other = sorted(set(getattr(text, "layer_types", None) or ()) - set(LAYER_TYPES))
    if other:
        return f"decoder has {', '.join(other)} layers"
    if getattr(text, "attn_logit_softcapping", None) is not None:
        return "attention scores are soft-capped"
    return None


def storage_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the cache holds keys and values of a model computing in ``dtype``.

    An fp32 model's states are stored in bf16 and used in fp32: they are the peak of a
    round's memory (46 KB per token per row for SmolLM2-135M in fp32), and halving them
    costs the sampling distribution a rounding of the states, not of the weights (inference
    engines sample from bf16 models for fp32-trained policies for the same reason). Training
    recomputes every log-prob in the model's own dtype.
    """
    return torch.bfloat16 if dtype == torch.float32 else dtype


def products_dtype(query: torch.Tensor) -> torch.dtype:
    """The dtype of a decoding step's attention products for ``query``: fp32 on a CPU, the
    query's own elsewhere.

    On a CPU, torch runs bf16 matrix products through oneDNN, which compiles a kernel for every
    shape it meets, and the own-states products grow by a key every step: in bf16 each step
    compiled new kernels and kept them (:mod:`swarmnode.compat.onednn`). fp32 products run in
    the BLAS, which compiles nothing; they are a small part of a step (the linear layers, whose
    shapes stay the same while the rows do, keep the model's dtype).
    """
    return torch.float32 if query.device.type == "cpu" else query.dtype


class _Room:
    """Room for ``capacity`` tokens of each of ``rows`` rows: ``rows`` [rows, capacity, kv heads, d]
    (token-major within a row), and ``states``, the same memory as [rows, kv heads, capacity, d].

    On the CPU the room is an anonymous memory mapping of its own: the OS backs a page only
    once it is written and takes the mapping back when the room goes, so room for tokens not
    generated yet costs nothing resident and leaves no block behind in the heap; :meth:`keep`
    hands back the pages of the rows it drops. Other devices get ``torch.empty``.
    """

    def __init__(self, rows: int, capacity: int, kv_heads: int, dim: int, dtype: torch.dtype,
                 device: torch.device):
        shape = (rows, capacity, kv_heads, dim)
        self.row_bytes = capacity * kv_heads * dim * dtype.itemsize
        self.map = mmap.mmap(-1, rows * self.row_bytes) if device.type == "cpu" and rows * self.row_bytes else None
        self.rows = (torch.frombuffer(self.map, dtype=dtype).view(shape) if self.map is not None
                     else torch.empty(shape, dtype=dtype, device=device))
        self.states = self.rows.transpose(1, 2)

    def keep(self, indices: list[int], length: int) -> None:
        """Keep rows ``indices`` (ascending; their first ``length`` tokens), moved to the front in order.

        Row by row, each written part one contiguous block, and only the rows that move: a
        row only ever moves towards the front, onto a row already moved or dropped.
        """
        kept = len(indices)
        for slot, row in enumerate(indices):
            if row != slot:
                self.rows[slot, :length] = self.rows[row, :length]
        self.rows = self.rows[:kept]
        self.states = self.rows.transpose(1, 2)
        if self.map is not None and hasattr(self.map, "madvise"):
            start = -(-kept * self.row_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
            if start < len(self.map):
                self.map.madvise(mmap.MADV_DONTNEED, start, len(self.map) - start)


class _RowLayer(CacheLayer):
    """One layer: the shared prompt states, and each row's generated states, both held in
    :func:`storage_dtype`.

    The rows' states live in room for ``capacity`` tokens a row (:class:`_Room`), so that a
    decoding step writes its own token and copies nothing else, and rows that end give their
    pages back. ``keys``/``values`` are the rooms' states; ``length`` tokens of them are written.
    """

    def __init__(self, prefix_keys: torch.Tensor, prefix_values: torch.Tensor, capacity: int):
        super().__init__()
        stored = storage_dtype(prefix_keys.dtype)
        self.prefix_keys, self.prefix_values = prefix_keys.to(stored), prefix_values.to(stored)
        self.capacity, self.length = capacity, 0
        self.rooms: tuple[_Room, _Room] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Store the step's states; return every row's own states so far, in :func:`storage_dtype`
        ([rows, kv heads, t, d] views: :func:`_attention` reads them in the model's dtype)."""
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise ValueError(f"this cache has room for {self.capacity} generated tokens a row, not {end}: "
                             "give SharedPrefixCache the decoding steps it will run")
        if self.rooms is None:
            rows, kv_heads, _, dim = key_states.shape
            stored = storage_dtype(key_states.dtype)
            self.rooms = (_Room(rows, self.capacity, kv_heads, dim, stored, key_states.device),
                          _Room(rows, self.capacity, kv_heads, dim, stored, key_states.device))
            self.hold(self.rooms[0].states, self.rooms[1].states)
        keys, values = self.states()
        keys[:, :, self.length:end] = key_states
        values[:, :, self.length:end] = value_states
        self.length = end
        return keys[:, :, :end], values[:, :, :end]

    def get_seq_length(self) -> int:
        return self.prefix_keys.shape[-2] + self.length

    def keep_rows(self, indices: torch.Tensor) -> None:
        if self.rooms is not None:
            rows = indices.tolist()
            if rows != sorted(rows):
                raise ValueError("rows are kept in their order: indices must ascend")
            for room in self.rooms:
                room.keep(rows, self.length)
            self.keys, self.values = self.rooms[0].states, self.rooms[1].states


def _left_padded(states: torch.Tensor, width: int) -> torch.Tensor:
    """``states`` [rows, kvh, t, d] with zeros in front up to ``width`` positions."""
    return torch.nn.functional.pad(states, (0, 0, width - states.shape[-2], 0))


class SharedPrefixCache(LayeredCache):
    """Prompt states once per prompt; ``rows[i]`` is the prompt of batch row i (non-decreasing).

    ``prompt_caches`` are the prefill caches of the prompts, one each and without padding, in
    order; ``prompt_mask`` [prompts, P] marks their real tokens, right-aligned (left padding):
    their states are put at those positions, zeros on the padding, which the bias masks.
    ``capacity`` is the most tokens a row will add (the decoding steps to run); a step beyond
    it is refused with ValueError.
    """

    def __init__(self, prompt_caches: list[Cache], prompt_mask: torch.Tensor, n: int, capacity: int):
        prompt_layers = [cache_layers(cache) for cache in prompt_caches]
        dtype = prompt_layers[0][0].states()[0].dtype  # the model's; the layers store theirs
        width = prompt_mask.shape[1]
        layers: list[_RowLayer] = []
        for i in range(len(prompt_layers[0])):
            parts = [prompt[i] for prompt in prompt_layers]
            keys = torch.cat([_left_padded(p.states()[0], width) for p in parts])
            values = torch.cat([_left_padded(p.states()[1], width) for p in parts])
            for part in parts:  # the prefills' copies go as the joined ones come
                part.keys = part.values = None
            layers.append(_RowLayer(keys, values, capacity))
        super().__init__(layers)
        self.row_layers = layers
        # 0 on real prompt positions, -inf on left padding: added to the prefix scores.
        self.prefix_bias = torch.zeros(prompt_mask.shape, dtype=dtype,
                                       device=prompt_mask.device).masked_fill(prompt_mask == 0, float("-inf"))
        self._set_rows([p for p in range(prompt_mask.shape[0]) for _ in range(n)])

    def _set_rows(self, rows: list[int]) -> None:
        self.rows = rows
        self.row_bias = self.prefix_bias[torch.tensor(rows, device=self.prefix_bias.device)]
        runs, start = [], 0
        for i in range(1, len(rows) + 1):
            if i == len(rows) or rows[i] != rows[start]:
                runs.append((rows[start], start, i))
                start = i
        self.runs = runs

    def keep_rows(self, indices: torch.Tensor) -> None:
        super().keep_rows(indices)
        self._set_rows([self.rows[i] for i in indices.tolist()])


def _per_run(cache: SharedPrefixCache, x_prefix: torch.Tensor, x_own: torch.Tensor, prefix: torch.Tensor,
             own: torch.Tensor, transpose: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """For each run of rows sharing a prompt: ``x_prefix[rows]`` [r, kvh, m, *] times that prompt's
    ``prefix`` states [kvh, P, d], as one matmul per prompt, and ``x_own[rows]`` times the rows'
    ``own`` states [r, kvh, t, d]; the states transposed when ``transpose``.

    Both kinds of states are read in x's dtype one run at a time, so no copy of every row's
    states in that dtype is ever made.
    """
    prefix_out, own_out = [], []
    for prompt, a, b in cache.runs:
        x = x_prefix[a:b]
        xs = x.transpose(0, 1).reshape(x.shape[1], (b - a) * x.shape[2], x.shape[3])
        states = prefix[prompt].to(x.dtype)
        res = torch.matmul(xs, states.transpose(-1, -2) if transpose else states)
        prefix_out.append(res.reshape(x.shape[1], b - a, x.shape[2], res.shape[-1]).transpose(0, 1))
        # Contiguous: the view's token-major strides would otherwise carry over to the copy.
        states = own[a:b].to(x.dtype, memory_format=torch.contiguous_format)
        own_out.append(torch.matmul(x_own[a:b], states.transpose(-1, -2) if transpose else states))
    return torch.cat(prefix_out), torch.cat(own_out)


def _attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask,
               dropout: float = 0.0, scaling: float | None = None, sliding_window: int | None = None,
               **kwargs) -> tuple[torch.Tensor, None]:
    """query [R, H, 1, d]; key/value [R, kvh, t, d]: the rows' own states (prompt states are in the cache),
    in the cache's storage dtype.

    ``sliding_window`` W (a sliding layer's): the query, at index P + t - 1 of every row, sees the
    keys at indices above P + t - 1 - W (transformers' ``sliding_window_overlay``).
    """
    cache = _ACTIVE.get()
    layer = cache.row_layers[layer_index(module)]
    _, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    scale: float = dim ** -0.5 if scaling is None else scaling
    prefix_keys, prefix_values, bias = layer.prefix_keys, layer.prefix_values, cache.row_bias
    if sliding_window is not None:
        first = prefix_keys.shape[-2] + key.shape[-2] - sliding_window  # the first index in the window
        if first > 0:
            prefix_keys, prefix_values = prefix_keys[..., first:, :], prefix_values[..., first:, :]
            bias = bias[:, first:]
            own_first = max(first - layer.prefix_keys.shape[-2], 0)
            key, value = key[..., own_first:, :], value[..., own_first:, :]
    q = group_query_heads(query.to(products_dtype(query)), kv_heads)
    prefix_scores, own_scores = _per_run(cache, q, q, prefix_keys, key, True)
    prefix_scores = prefix_scores * scale + bias[:, None, None, :]
    own_scores = own_scores * scale
    probs = torch.softmax(torch.cat([prefix_scores, own_scores], dim=-1).float(), dim=-1).to(q.dtype)
    prefix_probs, own_probs = probs.split([prefix_scores.shape[-1], own_scores.shape[-1]], dim=-1)
    prefix_out, own_out = _per_run(cache, prefix_probs, own_probs, prefix_values, value, False)
    out = (prefix_out + own_out).to(query.dtype)
    return ungroup_query_heads(out, heads).transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, _attention)


@contextlib.contextmanager
def decoding(model, cache: SharedPrefixCache) -> Iterator[None]:
    """Within the block, ``model``'s attention reads prompt states from ``cache``."""
    token = _ACTIVE.set(cache)
    try:
        with attention_swapped(model.config, NAME):
            yield
    finally:
        _ACTIVE.reset(token)
