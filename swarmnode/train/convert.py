"""A GGUF file to a plain safetensors model directory (fp32 or bf16), a block of rows at a time.

transformers loads a GGUF itself (``from_pretrained(gguf_file=...)``), but it de-quantizes
every tensor into memory before the model exists and then holds the model as well: 1.2 GB
peak for SmolLM2-135M and 3.9 GB for Qwen2.5-Coder-0.5B on a 2-core CPU. Here the names and
shapes of the weights come from the model's own layout (built on the meta device, no
memory), so the safetensors header is written first and each tensor is then read from the
file, de-quantized and written one block of rows at a time: the peak is the libraries plus
one block. The tensor names and the per-architecture fixes (Llama's q/k row order, Gemma's
norm offsets) are transformers' own, through :func:`swarmnode.compat.transformers.gguf_tensor_converter`,
so the copy holds exactly the weights transformers' own GGUF load gives (tests/test_convert.py).

The copy is written in the precision the node computes in (:data:`PRECISIONS`): fp32 holds the
exact de-quantized values, bf16 rounds them to 8 bits of mantissa and halves the file. Either
way transformers maps the file instead of copying it when it loads the model in the file's
own precision, so a node's memory holds the weights once.

``python -m swarmnode.train.convert GGUF OUT [--tie-output] [--precision bfloat16]`` runs one
conversion in its own process (how the node runs it, so that none of the conversion's memory
stays in the node); a ConversionError is its last line on stderr and exit status 3.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from swarmnode.compat.transformers import gguf_tensor_converter

if TYPE_CHECKING:
    from gguf import ReaderTensor

# fp32 bytes of one block of rows: small beside the model, large enough that numpy's
# de-quantization runs on big arrays.
BLOCK_BYTES = 16 << 20
# torch dtype name -> (safetensors dtype, bytes an element).
PRECISIONS = {"float32": ("F32", 4), "bfloat16": ("BF16", 2)}
WEIGHTS_FILE = "model.safetensors"
# The GGUF names of the output matrix and the embedding (llama.cpp's standard names).
OUTPUT, EMBEDDING = "output.weight", "token_embd.weight"


class ConversionError(RuntimeError):
    """The GGUF file does not fit the model layout transformers derives from it."""


@dataclass(frozen=True)
class _Planned:
    gguf: ReaderTensor
    name: str  # state-dict name in the converted model
    shape: tuple[int, ...]  # numpy order (GGUF lists dimensions innermost first)


def _architecture(reader) -> str:
    field = reader.fields["general.architecture"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def convert_gguf(gguf_path: Path, out: Path, *, tie_output: bool = False, precision: str = "float32") -> int:
    """Write ``out`` (created, must not exist): config.json, generation_config.json, the
    tokenizer and ``model.safetensors`` in ``precision`` (a key of :data:`PRECISIONS`) for the
    GGUF file at ``gguf_path``.

    ``tie_output``: the file keeps an output matrix apart from the embedding although the
    model ties them (both quantizations of one matrix); the output matrix then serves as both,
    and the embedding's copy is not written. Returns the number of parameters written.
    Raises ConversionError when the file's tensors do not match the layout.
    """
    import gguf
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoTokenizer,
        GenerationConfig,
    )

    source, name = gguf_path.parent, gguf_path.name
    out.mkdir(parents=True)
    try:  # the reader checks that every tensor lies within the file
        AutoTokenizer.from_pretrained(source, gguf_file=name).save_pretrained(out)
        config = AutoConfig.from_pretrained(source, gguf_file=name)
        reader = gguf.GGUFReader(gguf_path)
    except (OSError, ValueError) as exc:
        raise ConversionError(f"cannot read {name} as a GGUF model file ({exc})") from None
    if tie_output:
        config.tie_word_embeddings = True
    with torch.device("meta"):
        layout = AutoModelForCausalLM.from_config(config)
    names, convert = gguf_tensor_converter(_architecture(reader), layout, config.to_dict())
    plan = _plan(reader.tensors, names, {k: tuple(v.shape) for k, v in layout.state_dict().items()}, tie_output)
    missing = {n for n, _ in layout.named_parameters()} - {p.name for p in plan}
    if missing:
        raise ConversionError(f"the GGUF file has no tensor for {', '.join(sorted(missing)[:3])}")
    with open(gguf_path, "rb") as src, open(out / WEIGHTS_FILE, "wb") as dst:
        dst.write(_header(plan, precision))
        for p in plan:
            _copy_tensor(src.fileno(), p, convert, lambda w: _write(dst, w, precision))
    config.architectures = [type(layout).__name__]
    config.dtype = getattr(torch, precision)
    config.save_pretrained(out)
    GenerationConfig.from_model_config(config).save_pretrained(out)
    return sum(math.prod(p.shape) for p in plan)


def _plan(tensors, names: dict[str, str], shapes: dict[str, tuple[int, ...]], tie_output: bool) -> list[_Planned]:
    """Which GGUF tensor becomes which state-dict entry, in file order."""
    if tie_output:
        if not {OUTPUT, EMBEDDING} <= {t.name for t in tensors} or EMBEDDING not in names:
            raise ConversionError(f"tie_output needs both {OUTPUT} and {EMBEDDING} in the GGUF file")
        names = {**names, OUTPUT: names[EMBEDDING]}
    plan = []
    for t in tensors:
        if t.name not in names or (tie_output and t.name == EMBEDDING):
            continue  # transformers' loader skips it too (e.g. precomputed rope frequencies)
        target = names[t.name]
        shape = tuple(int(d) for d in reversed(t.shape))
        if shapes.get(target) != shape:
            raise ConversionError(f"GGUF tensor {t.name} has shape {shape}, the model's {target} "
                                  f"{shapes.get(target)}")
        plan.append(_Planned(t, target, shape))
    return plan


def _header(plan: list[_Planned], precision: str) -> bytes:
    """The safetensors header: little-endian u64 length, then JSON padded to 8 bytes."""
    entries: dict[str, object] = {"__metadata__": {"format": "pt"}}
    tag, width = PRECISIONS[precision]
    offset = 0
    for p in plan:
        size = width * math.prod(p.shape)
        entries[p.name] = {"dtype": tag, "shape": list(p.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    return len(text).to_bytes(8, "little") + text


def _copy_tensor(fd: int, p: _Planned, convert: Callable, write: Callable[[np.ndarray], None]) -> None:
    """De-quantize GGUF tensor ``p`` and ``write`` it a block of rows (first axis) at a time.

    Only tensors the architecture leaves unchanged go block by block: the first block shows it
    (``convert`` hands back its argument). Others (small: attention and norm weights) are
    converted whole.
    """
    from gguf import dequantize

    t = p.gguf
    inner_bytes = int(t.n_bytes) * p.shape[-1] // math.prod(p.shape)  # bytes of one innermost row
    rows = p.shape[0] if len(p.shape) > 1 else 1
    row_bytes = int(t.n_bytes) // rows

    def read(start: int, count: int) -> np.ndarray:
        raw = os.pread(fd, count * row_bytes, int(t.data_offset) + start * row_bytes)
        data = np.frombuffer(raw, dtype=np.uint8).reshape(-1, inner_bytes)
        return dequantize(data, t.tensor_type).reshape((count, *p.shape[1:]) if len(p.shape) > 1 else p.shape)

    block = max(1, BLOCK_BYTES // (4 * math.prod(p.shape[1:]))) if len(p.shape) > 1 else 1
    first = read(0, min(block, rows))
    weights, renamed = convert(first, t.name)
    if renamed != t.name:
        raise ConversionError(f"transformers renames GGUF tensor {t.name} to {renamed}: not supported here")
    if weights is first:
        write(first)
        for start in range(block, rows, block):
            write(read(start, min(block, rows - start)))
        return
    if rows > block:
        weights, _ = convert(read(0, rows), t.name)
    if tuple(weights.shape) != p.shape:
        raise ConversionError(f"GGUF tensor {t.name} became shape {tuple(weights.shape)}, expected {p.shape}")
    write(weights)


def _write(dst, weights: np.ndarray, precision: str) -> None:
    fp32 = np.ascontiguousarray(weights, dtype="<f4")
    if precision == "bfloat16":  # numpy has no bf16: torch rounds to nearest even, as its own casts do
        dst.write(torch.from_numpy(fp32).to(torch.bfloat16).view(torch.int16).numpy().data.cast("B"))
    else:
        dst.write(fp32.data.cast("B"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swarmnode.train.convert",
                                     description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("out", type=Path, help="the model directory to create")
    parser.add_argument("--tie-output", action="store_true", help="one matrix for the embedding and the output")
    parser.add_argument("--precision", choices=sorted(PRECISIONS), default="float32")
    args = parser.parse_args(argv)
    try:
        convert_gguf(args.gguf, args.out, tie_output=args.tie_output, precision=args.precision)
    except ConversionError as exc:
        print(exc, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
