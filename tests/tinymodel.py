"""A tiny random causal LM with a real tokenizer and chat template, built offline.

Unit tests and multi-process tests load it as a "local model directory", the same code
path a user's own model takes. ``python tests/tinymodel.py DIR`` writes one.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_CORPUS = [
    "Calculate 1 + 2. <answer>3</answer> Is 2000 a leap year? Answer with Yes or No. <answer>Yes</answer>",
    "You are a careful problem solver. Work out the answer to the user's task and give only the final "
    "answer, inside <answer> and </answer> tags.",
    "0123456789 + - * / = ( ) . , ? ! abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
]


def build_tiny_model(path: str | Path, *, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    if (path / "config.json").is_file():
        return path
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<answer>", "</answer>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token="<|im_start|>")
    fast.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=hidden, intermediate_size=hidden * 2,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=1024, eos_token_id=fast.eos_token_id,
                      pad_token_id=fast.pad_token_id, bos_token_id=fast.bos_token_id, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


if __name__ == "__main__":
    print(build_tiny_model(sys.argv[1]))
