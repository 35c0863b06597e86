"""transformers (and peft) internals that swarmnode relies on, each behind one function or class.

Every contract below was checked on the releases in :data:`CHECKED_ON` by
``tests/test_compat.py`` and the sampler and log-prob equivalence tests
(``.ci/transformers-release VERSION`` runs them against any release). ``pyproject.toml``
admits exactly :data:`CHECKED_RANGE`; a release outside it may rename any of these.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.utils.checkpoint
from transformers.cache_utils import Cache, DynamicLayer

if TYPE_CHECKING:
    from transformers import PreTrainedModel
    from transformers.modeling_layers import GradientCheckpointingLayer

# The transformers releases pyproject.toml admits, and the ones these contracts were run on.
CHECKED_RANGE = ">=5.15,<5.24"
CHECKED_ON = ("5.15.1", "5.23.0")
# peft's bound in pyproject.toml, and the release :func:`adapter_parameters` was run on.
PEFT_CHECKED_RANGE = ">=0.17,<0.22"
PEFT_CHECKED_ON = ("0.21.2",)


# ---- activation checkpointing ----------------------------------------------------------

@contextlib.contextmanager
def checkpointing_with_cache(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, every decoder layer of ``model`` recomputes its activations in the
    backward pass (non-reentrant ``torch.utils.checkpoint``) and still uses the KV cache it is
    given; afterwards checkpointing is off again.

    Contract (checked on 5.15.1, 5.23.0): decoder layers are ``GradientCheckpointingLayer``s;
    in training, one whose ``gradient_checkpointing`` is true calls its
    ``_gradient_checkpointing_func`` on its forward, and keeps ``past_key_values`` only when
    ``_can_checkpoint_with_cache`` is true (the flag exists since 5.15; before it the cache was
    dropped silently). Raises RuntimeError on a transformers without the flag. The caller must
    give the layers caches that a replayed layer reads the same way as its first run.
    """
    from transformers.modeling_layers import GradientCheckpointingLayer

    if not hasattr(GradientCheckpointingLayer, "_can_checkpoint_with_cache"):
        raise RuntimeError("this transformers drops the KV cache of checkpointed layers, which would train "
                           "on completions without their prompt: pip install -U 'transformers>=5.15'")
    layers = _checkpoint_layers(model)
    for layer in layers:
        # set_gradient_checkpointing assigns this attribute; no transformers class declares it
        layer._gradient_checkpointing_func = functools.partial(  # pyright: ignore[reportArgumentType]
            torch.utils.checkpoint.checkpoint, use_reentrant=False)
        layer.gradient_checkpointing, layer._can_checkpoint_with_cache = True, True
    try:
        yield
    finally:
        for layer in layers:
            layer.gradient_checkpointing = False


def _checkpoint_layers(model: torch.nn.Module) -> list[GradientCheckpointingLayer]:
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def checkpointable(model: torch.nn.Module) -> bool:
    """True when :func:`checkpointing_with_cache` has layers of ``model`` to recompute.

    Contract (checked on 5.15.1 and 5.23.0 with Llama, on 5.23.0 with Qwen2 and Gemma 3): decoder layers are
    ``GradientCheckpointingLayer``s; a model whose layers are not keeps its activations.
    """
    return bool(_checkpoint_layers(model))


# ---- attention -------------------------------------------------------------------------

@contextlib.contextmanager
def attention_swapped(config, name: str) -> Iterator[None]:
    """Within the block, the model of ``config`` calls the attention function registered as
    ``name`` (``AttentionInterface.register``); the previous one is restored afterwards.

    Contract (checked on 5.15.1, 5.23.0): every attention layer reads
    ``config._attn_implementation`` at each forward to pick its function, and calls it with
    ``scaling=`` (Gemma 3: ``query_pre_attn_scalar ** -0.5``, not the head size's) and, on
    Qwen2 and Gemma 3, ``sliding_window=`` (the window on a sliding layer, None on a full one;
    Llama passes none: all its layers are full); checked on Llama, Qwen2 and Gemma 3 on
    5.23.0. When the name has no mask function registered, the models build no masks and
    pass ``attention_mask=None``. Setting it directly
    skips ``set_attn_implementation``'s validation and its walk over submodules, which would
    refuse a custom name for decoding with a model's own mask functions and cost a walk per
    call.
    """
    previous = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous


def layer_index(attention_module: torch.nn.Module) -> int:
    """The decoder layer (0-based) that ``attention_module``, as passed to an attention function, belongs to.

    Contract (checked on 5.15.1, 5.23.0, Llama/Qwen2/SmolLM2 attention; Gemma 3 on 5.23.0): ``module.layer_idx``,
    which is also the index of its layer in ``Cache.layers``.
    """
    index = attention_module.layer_idx
    assert isinstance(index, int), "an attention module's layer_idx is an int"
    return index


def group_query_heads(query: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """``query`` [rows, heads, q, d] as [rows, kv_heads, heads // kv_heads * q, d]: the queries of
    each key/value head together, so one matmul scores them against that head's keys.

    Contract (checked on 5.15.1, 5.23.0): query head h reads key/value head
    h // (heads / kv_heads), the layout of ``repeat_kv`` in transformers' attention functions.
    """
    rows, heads, q_len, dim = query.shape
    return query.reshape(rows, kv_heads, heads // kv_heads * q_len, dim)


def ungroup_query_heads(grouped: torch.Tensor, heads: int) -> torch.Tensor:
    """The inverse of :func:`group_query_heads`: [rows, kv_heads, heads // kv_heads * q, d] as [rows, heads, q, d]."""
    rows, kv_heads, grouped_len, dim = grouped.shape
    return grouped.reshape(rows, heads, grouped_len * kv_heads // heads, dim)


# ---- KV caches -------------------------------------------------------------------------

class CacheLayer(DynamicLayer):
    """transformers' growing per-layer KV cache, the base of swarmnode's own cache layers.

    Contract (checked on 5.15.1, 5.23.0): ``keys``/``values`` are [rows, kv_heads, tokens,
    head_dim]; ``update(key_states, value_states, *args, **kwargs)`` returns the keys and
    values the attention reads; the model calls ``get_seq_length`` for positions and masks;
    ``Cache.batch_select_indices`` calls each layer's ``batch_select_indices``, forwarded here
    to :meth:`keep_rows`, which subclasses override. ``is_initialized`` and
    ``lazy_initialization`` (transformers' first-update bookkeeping of dtype and device) are
    touched only by :meth:`stored` and :meth:`hold`.
    """

    def stored(self) -> bool:
        """True once an update or :meth:`hold` stored states (possibly zero tokens of them)."""
        return self.is_initialized

    def states(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values this layer holds; only once :meth:`stored`."""
        keys, values = self.keys, self.values
        assert keys is not None and values is not None, "a layer holds states once an update or hold stored them"
        return keys, values

    def hold(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Make ``keys``/``values`` this layer's states, with the dtype and device bookkeeping of a first update."""
        if not self.is_initialized:
            self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values

    def keep_rows(self, indices: torch.Tensor) -> None:
        """Keep only the batch rows ``indices`` (transformers' own row selection by default)."""
        super().batch_select_indices(indices)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keep_rows(indices)


class LayeredCache(Cache):
    """A cache made of the given per-layer caches, one per decoder layer.

    Contract (checked on 5.15.1, 5.23.0): ``Cache(layers=...)`` builds it; ``cache.layers[i]``
    serves the decoder layer with ``layer_idx`` i; ``batch_select_indices`` (forwarded to
    :meth:`keep_rows`, which subclasses override) removes batch rows.
    """

    def __init__(self, layers: Sequence[DynamicLayer]):
        super().__init__(layers=[*layers])

    def keep_rows(self, indices: torch.Tensor) -> None:
        """Keep only the batch rows ``indices`` in every layer."""
        super().batch_select_indices(indices)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keep_rows(indices)


def cache_layers(cache: Cache) -> list[CacheLayer]:
    """The per-layer caches of ``cache``, in layer order, for a cache of :class:`CacheLayer`\\ s
    (:func:`growing_cache` of one, a :class:`LayeredCache` of them); TypeError for another.

    Contract (checked on 5.15.1, 5.23.0): ``cache.layers[i]`` serves the decoder layer with ``layer_idx`` i.
    """
    layers = []
    for layer in cache.layers:
        if not isinstance(layer, CacheLayer):
            raise TypeError(f"a {type(layer).__name__} is not a swarmnode CacheLayer")
        layers.append(layer)
    return layers


def growing_cache(layer_class: type[DynamicLayer]) -> Cache:
    """An empty cache that creates a ``layer_class()`` for each decoder layer on its first update.

    Contract (checked on 5.15.1, 5.23.0): ``Cache(layer_class_to_replicate=...)``.
    """
    return Cache(layer_class_to_replicate=layer_class)


def repeat_rows(cache: Cache, n: int) -> None:
    """Repeat every batch row of ``cache`` ``n`` times in place (row i becomes rows i*n .. i*n+n-1).

    Contract (checked on 5.15.1, 5.23.0): ``Cache.batch_repeat_interleave``, as generation's
    beam search uses it; undocumented.
    """
    cache.batch_repeat_interleave(n)


def keep_rows(cache: Cache, indices: torch.Tensor) -> None:
    """Keep only the batch rows ``indices`` of ``cache``, in place.

    Contract (checked on 5.15.1, 5.23.0): ``Cache.batch_select_indices``, which
    :class:`LayeredCache` and :class:`CacheLayer` route to their ``keep_rows``; undocumented.
    """
    cache.batch_select_indices(indices)


# ---- loading and saving ----------------------------------------------------------------

def drop_quantizer(model: PreTrainedModel) -> None:
    """Make ``model`` (already de-quantized, e.g. loaded from GGUF) save and train as a plain model.

    Contract (checked on 5.15.1, 5.23.0): ``save_pretrained`` refuses a model whose
    ``hf_quantizer`` cannot serialize (GGUF's), and training refuses a quantized one; with the
    attribute cleared the model saves its plain weights. The saved ``config.json`` still
    carries a ``quantization_config`` the caller must remove.
    """
    model.hf_quantizer = None  # pyright: ignore[reportArgumentType]  # set by from_pretrained, declared nowhere


def gguf_tensor_converter(architecture: str, model: torch.nn.Module, config: dict) -> tuple[
        dict[str, str], Callable[[np.ndarray, str], tuple[np.ndarray, str]]]:
    """How transformers' GGUF loader fills ``model``: the state-dict name of each GGUF tensor
    name it loads (tensors it skips are absent), and a function taking one de-quantized GGUF
    tensor and its GGUF name to the tensor and GGUF name the loader then maps. ``model`` only
    lends its parameter names (it may live on the meta device); ``architecture`` is the file's
    ``general.architecture``, ``config`` the model's config as a dict.

    The function hands back its argument itself, unchanged, for every tensor the
    architecture's processor leaves alone; it decides by the tensor's name, so a caller may
    feed such a tensor one block of rows at a time.

    Contract (checked on 5.23.0 with the llama, qwen2 and gemma3 files of the catalogue, which
    its GGUF loader reads this way; a newer path serves a few other architectures):
    ``transformers.modeling_gguf_pytorch_utils`` maps names with
    ``get_gguf_hf_weights_map(model, processor)`` and transforms tensors with
    ``TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=...)``, whose
    ``process(weights=, name=, tensor_key_mapping=, parsed_parameters=)`` returns a
    ``GGUFTensor(weights, name, metadata)``, as ``load_gguf_checkpoint`` calls them; undocumented.
    """
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=config)
    names = get_gguf_hf_weights_map(model, processor)
    parsed: dict = {"tensors": {}}

    def convert(weights: np.ndarray, name: str) -> tuple[np.ndarray, str]:
        result = processor.process(weights=weights, name=name, tensor_key_mapping=names, parsed_parameters=parsed)
        return result.weights, result.name

    return names, convert


# ---- tokenizers ------------------------------------------------------------------------

def drop_construction_tables(tokenizer) -> None:
    """Free the Python copies of the vocabulary and merges ``tokenizer`` was built from.

    Contract (checked on 5.23.0): a tokenizer class that builds its Rust backend (``_tokenizer``)
    in ``__init__`` from a vocabulary and merges (Qwen2's, Llama's, Gemma's, GPT-NeoX's) keeps
    them as ``_vocab`` and ``_merges``, and nothing reads them afterwards: encoding, decoding,
    the vocabulary, the chat template and saving go through the backend. Qwen2.5's are a
    151,936-entry dict and 151,387 pairs of strings, 53 MB of a node's heap. A tokenizer
    without them is left as it is.
    """
    if getattr(tokenizer, "_tokenizer", None) is None:
        return
    for name in ("_vocab", "_merges"):
        if name in vars(tokenizer):
            delattr(tokenizer, name)


# ---- peft ------------------------------------------------------------------------------

def adapter_parameters(model: torch.nn.Module, adapter: str) -> list[torch.nn.Parameter]:
    """The parameters of the LoRA adapter named ``adapter`` in a peft model.

    Contract (checked on peft 0.21.2): peft names an adapter's parameters
    ``...lora_A.<adapter>.weight`` / ``...lora_B.<adapter>.weight``; no public call lists one
    adapter's parameters when several share a model.
    """
    return [p for name, p in model.named_parameters() if f".{adapter}." in name]
