"""Tiny random causal LMs with a real tokenizer, built offline, one per catalogue architecture.

Unit tests and multi-process tests load one as a "local model directory", the same code
path a user's own model takes. ``python tests/tinymodel.py DIR [ARCH]`` writes one.

The architectures mirror what the fast paths must hold for:

- ``llama`` (SmolLM2): grouped-query attention, tied output layer, ChatML template.
- ``qwen2`` (Qwen2.5): grouped-query attention with 3 query heads per key/value head, q/k/v
  biases, an output layer apart from the embedding, and a vocabulary far larger than the
  tokenizer (Qwen pads its vocabulary; ids the tokenizer does not know still get logits).
- ``gemma3`` (Gemma 3): sliding-window layers with a window of 8 tokens (far shorter than
  the tests' prompts), a full-attention layer between them, attention scaled by
  ``query_pre_attn_scalar`` rather than the head size, scaled embeddings, a tokenizer that
  starts every encoding with its BOS, and no chat template (the base model's GGUF carries none).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ARCHITECTURES = ("llama", "qwen2", "gemma3")
# Where the model-level tests put their tiny models: the CPU, unless SWARMNODE_TEST_DEVICE
# names another (``cuda``, ``mps``) to check the same paths on an accelerator.
TEST_DEVICE = os.environ.get("SWARMNODE_TEST_DEVICE", "cpu")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The tiny Gemma 3's window: shorter than every prompt of the tests (the system prompt alone
# is over 30 tokens), so decoding and training both cross it.
GEMMA3_WINDOW = 8
_CORPUS = [
    "Calculate 1 + 2. <answer>3</answer> Is 2000 a leap year? Answer with Yes or No. <answer>Yes</answer>",
    "You are a careful problem solver. Work out the answer to the user's task and give only the final "
    "answer, inside <answer> and </answer> tags.",
    "0123456789 + - * / = ( ) . , ? ! abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
]


def _tokenizer(arch: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<answer>", "</answer>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS * 4, trainer)
    if arch == "gemma3":  # Gemma's tokenizer starts every encoding with its BOS
        tok.post_processor = processors.TemplateProcessing(
            single="<|im_start|> $A", special_tokens=[("<|im_start|>", tok.token_to_id("<|im_start|>"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token="<|im_start|>")
    if arch != "gemma3":
        fast.chat_template = CHAT_TEMPLATE
    return fast


def _config(arch: str, vocab: int, hidden: int, layers: int, special: dict):
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen2Config

    if arch == "llama":
        return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2,
                           num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=1024, tie_word_embeddings=True, **special)
    if arch == "qwen2":
        return Qwen2Config(vocab_size=vocab + 1500, hidden_size=hidden * 3 // 2, intermediate_size=hidden * 3,
                           num_hidden_layers=layers, num_attention_heads=6, num_key_value_heads=2,
                           max_position_embeddings=1024, tie_word_embeddings=False, use_sliding_window=False,
                           **special)
    if arch == "gemma3":
        types = (["sliding_attention"] * 2 + ["full_attention"]) * max(1, layers // 2)
        return Gemma3TextConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2,
                                num_hidden_layers=len(types), layer_types=types, num_attention_heads=4,
                                num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=12,
                                sliding_window=GEMMA3_WINDOW, max_position_embeddings=1024,
                                tie_word_embeddings=True, **special)
    raise ValueError(f"unknown architecture {arch!r}: one of {ARCHITECTURES}")


def build_tiny_model(path: str | Path, *, arch: str = "llama", seed: int = 0, hidden: int = 32,
                     layers: int = 2, **config) -> Path:
    """A tiny random ``arch`` model and its tokenizer saved in ``path`` (kept if already there);
    ``config`` overrides fields of the model's config."""
    import torch
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if (path / "config.json").is_file():
        return path
    fast = _tokenizer(arch)
    special = dict(eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, bos_token_id=fast.bos_token_id,
                   **config)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_config(arch, len(fast), hidden, layers, special))
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


if __name__ == "__main__":
    print(build_tiny_model(sys.argv[1], arch=sys.argv[2] if len(sys.argv) > 2 else "llama"))
