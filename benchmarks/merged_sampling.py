"""Sampling with the adapter merged into the weights against applied apart, alternated.

A model of Qwen2.5-0.5B's shape (24 layers, hidden 896, 14 query and 2 key/value heads,
vocabulary 151,936) with random weights, the node's default LoRA adapter made non-zero, and
``Policy.generate`` at 8 prompts x 8 rows; with random weights every row decodes the full
``--steps``, so both sides do the same work. No download: the tokenizer is the tests' tiny one.
Merging is what a node does on CUDA (``swarmnode/train/merged.py``); this prints both sides'
seconds, milliseconds a decoding step and peak GPU memory::

    PYTHONPATH=. python benchmarks/merged_sampling.py [--device cuda] [--steps 64] [--pairs 3]

On a CPU ``--small`` shrinks the model to 2 layers (a check that it runs, not a figure).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

QWEN_SHAPE = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14)
SMALL_SHAPE = dict(hidden_size=96, intermediate_size=192, num_hidden_layers=2, num_attention_heads=6)


def build_policy(device: torch.device, small: bool):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from swarmnode.config import NodeConfig
    from swarmnode.train.model import BaseModel
    from swarmnode.train.policy import Policy
    from tinymodel import build_tiny_model

    tiny = build_tiny_model(Path("/tmp/swarmnode-bench-tiny-qwen2"), arch="qwen2")
    shape = SMALL_SHAPE if small else QWEN_SHAPE
    cfg = AutoConfig.from_pretrained(tiny)
    cfg.update(dict(layer_types=["full_attention"] * shape["num_hidden_layers"], num_key_value_heads=2,
                    vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=4096, **shape))
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).to(device)
    model.requires_grad_(False)
    model.config.use_cache = True
    policy = Policy(BaseModel(model, AutoTokenizer.from_pretrained(tiny), "qwen2.5-shaped", device, dtype),
                    NodeConfig())
    with torch.no_grad():  # a trained adapter: the zero-initialised one would merge as nothing
        for p in policy.params:
            p.normal_(0, 0.01)
    return policy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=64, help="new tokens a row")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="2 layers instead of 24")
    args = ap.parse_args()
    import swarmnode.train.policy as policy_module

    device = torch.device(args.device)
    policy = build_policy(device, args.small)
    prompts = [policy.prompt(f"Calculate {i} + {i + 1}.") for i in range(8)]

    def run(merge: bool) -> None:
        policy_module.merges_on = lambda _device: merge
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        tokens = policy.generate(prompts, 8, max_new_tokens=args.steps, temperature=1.0).tokens
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak = f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MiB" if device.type == "cuda" else "n/a"
        step_ms = 1000 * seconds / args.steps
        print(f"merged={str(merge):5}  tokens {tokens:5d}  {seconds:7.3f} s  {step_ms:6.1f} ms a step"
              f"  peak GPU memory {peak}", flush=True)

    run(False)  # warm-up: kernels, allocator
    for _ in range(args.pairs):
        run(False)
        run(True)


if __name__ == "__main__":
    main()
