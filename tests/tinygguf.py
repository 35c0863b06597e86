"""A tiny GGUF file of a random causal LM, written the way llama.cpp writes real ones.

Tests of the fetch and the conversion use it offline: a Llama file (q/k rows permuted as
llama.cpp's converter does, which transformers' loader undoes), or a Qwen2 file whose output
matrix is stored apart from the embedding (two quantizations of one matrix, as in the
catalogue's Qwen2.5-Coder file). Weights are Q8_0 (norms and biases F32), the tokenizer is
the tiny byte-level BPE of ``tinymodel`` with its chat template.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tinymodel import build_tiny_model

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 128


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's row order for q/k projections (the inverse of transformers' reverse permute)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def build_tiny_gguf(path: Path, *, arch: str = "llama", seed: int = 0) -> Path:
    """Write a tiny GGUF model file at ``path`` (``arch``: "llama" or "qwen2") and return it."""
    import gguf

    tok_dir = build_tiny_model(path.parent / f"{path.stem}-tokenizer")
    tok = json.loads((tok_dir / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    specials = {t["content"]: t["id"] for t in tok["added_tokens"]}
    rng = np.random.default_rng(seed)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}")
    w.add_block_count(LAYERS)
    w.add_context_length(1024)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(specials["<|im_start|>"])
    w.add_eos_token_id(specials["<|im_end|>"])
    w.add_pad_token_id(specials["<|endoftext|>"])
    w.add_chat_template(json.loads((tok_dir / "tokenizer_config.json").read_text()).get("chat_template")
                        or (tok_dir / "chat_template.jinja").read_text())

    def q8(name: str, arr: np.ndarray) -> None:
        w.add_tensor(name, gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0),
                     raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    embedding = rand(len(tokens), HIDDEN)
    q8("token_embd.weight", embedding)
    if arch == "qwen2":
        # The same matrix again, kept apart, as Qwen's file keeps its output matrix.
        w.add_tensor("output.weight", embedding)
    w.add_tensor("output_norm.weight", 1 + rand(HIDDEN))
    head_dim = HIDDEN // HEADS
    for i in range(LAYERS):
        q, k = rand(HIDDEN, HIDDEN), rand(KV_HEADS * head_dim, HIDDEN)
        if arch == "llama":
            q, k = _permute(q, HEADS), _permute(k, KV_HEADS)
        q8(f"blk.{i}.attn_q.weight", q)
        q8(f"blk.{i}.attn_k.weight", k)
        q8(f"blk.{i}.attn_v.weight", rand(KV_HEADS * head_dim, HIDDEN))
        q8(f"blk.{i}.attn_output.weight", rand(HIDDEN, HIDDEN))
        if arch == "qwen2":
            for part, size in (("q", HIDDEN), ("k", KV_HEADS * head_dim), ("v", KV_HEADS * head_dim)):
                w.add_tensor(f"blk.{i}.attn_{part}.bias", rand(size))
        q8(f"blk.{i}.ffn_gate.weight", rand(FFN, HIDDEN))
        q8(f"blk.{i}.ffn_up.weight", rand(FFN, HIDDEN))
        q8(f"blk.{i}.ffn_down.weight", rand(HIDDEN, FFN))
        w.add_tensor(f"blk.{i}.attn_norm.weight", 1 + rand(HIDDEN))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", 1 + rand(HIDDEN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
