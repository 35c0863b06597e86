"""Sampling at its worst for memory: every row runs to the token limit (no stop string, no EOS).

A real round's length varies with how many completions close their answer early, so its peak
RSS does too; this fixed workload (round 0's questions of the packaged tasks, Q x L rows of
exactly ``--max-new-tokens`` tokens, through ``swarmnode.train.sampler.sample``) gives the same
tokens on every run and tree, for comparisons of decoding memory and speed::

    PYTHONPATH=. python benchmarks/decode_peak.py --max-new-tokens 128
    PYTHONPATH=. python benchmarks/ab.py --tree before=/tmp/before --tree after=. --pairs 2 -- \\
        benchmarks/decode_peak.py --max-new-tokens 128

The prefill is timed apart (a run of one new token before the measured one), so decoding's own
tokens per second are printed too. ``--roofline`` compares them with what this machine allows
for the model: a decoding step reads every weight of the model once (the input embedding only
by rows, unless the output layer shares it) and the rows' keys and values, and does two
FLOPs per weight per row; the machine's memory bandwidth (a large tensor copy) and matmul
FLOP/s (a 4096 x 4096 product in the model's dtype) bound the steps a second::

    PYTHONPATH=. python benchmarks/decode_peak.py --model DIR --roofline --questions 8 --completions 8
    PYTHONPATH=. python benchmarks/decode_peak.py --model DIR --roofline --questions 1 --completions 1
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from common import add_size_args, bench_config, build_solo_node, peak_rss_mb
from swarmnode.train.prefixattn import storage_dtype
from swarmnode.train.sampler import sample

_NEVER = "\x00swarmnode: never generated\x00"


def _best_seconds(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def memory_bandwidth_gb_s(size_bytes: int = 2**30) -> float:
    """Bytes read plus written a second by a large tensor copy (torch's threads), in GB/s."""
    src = torch.ones(size_bytes // 4)
    dst = torch.empty_like(src)
    return 2 * size_bytes / _best_seconds(lambda: dst.copy_(src), 5) / 1e9


def matmul_gflop_s(dtype: torch.dtype, n: int = 4096) -> float:
    """FLOP/s of one n x n x n matrix product in ``dtype`` (torch's threads), in GFLOP/s."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    return 2 * n ** 3 / _best_seconds(lambda: a @ b, 3) / 1e9


def step_cost(model, rows: int, prompts: int, prompt_tokens: float, own_tokens: float) -> tuple[float, float]:
    """(bytes read, FLOPs) of one decoding step of ``rows`` rows, ``own_tokens`` generated each on average."""
    embedding, output = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    tied = embedding.data_ptr() == output.data_ptr()
    read = [p for p in model.parameters() if tied or p is not embedding]
    weight_bytes = sum(p.numel() * p.element_size() for p in read)
    weights = sum(p.numel() for p in read)
    cfg = model.config.get_text_config(decoder=True)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    stored = torch.empty(0, dtype=storage_dtype(model.dtype)).element_size()
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * stored
    kv_bytes = kv_per_token * (prompts * prompt_tokens + rows * own_tokens)
    attention_flops = (4 * rows * (prompt_tokens + own_tokens) * cfg.num_attention_heads * head_dim
                       * cfg.num_hidden_layers)
    return weight_bytes + kv_bytes, 2 * rows * weights + attention_flops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_args(ap, threads=1)
    ap.add_argument("--roofline", action="store_true", help="also measure bandwidth and FLOP/s and print the bound")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    cfg = bench_config(questions=args.questions, completions=args.completions, max_new_tokens=args.max_new_tokens,
                       threads=args.threads, model=args.model, dtype=args.dtype)
    node = build_solo_node(cfg)
    policy = node.policy
    prompts = [policy.prompt(q.question) for q in node.tasks.sample(0, args.questions)]
    policy.model.eval()
    rows_n = args.questions * args.completions

    def run(new_tokens: int) -> tuple[float, int]:
        torch.manual_seed(0)
        t0 = time.perf_counter()
        rows = sample(policy.model, policy.tokenizer, prompts, args.completions, max_new_tokens=new_tokens,
                      temperature=cfg.temperature, stop_string=_NEVER, eos_ids=(), token_texts=policy.token_texts,
                      device=policy.device)
        return time.perf_counter() - t0, sum(len(r) for r in rows)

    prefill_s, _ = run(1)  # the prefill and one token; it also pages the weights in
    seconds, tokens = run(args.max_new_tokens)
    decode_rate = (tokens - rows_n) / (seconds - prefill_s) if args.max_new_tokens > 1 else float("nan")
    result = {"seconds": seconds, "tokens_generated": tokens, "tokens_per_second": tokens / seconds,
              "prefill_seconds": prefill_s, "decode_tokens_per_second": decode_rate, "peak_rss_mb": peak_rss_mb()}
    if args.roofline:
        lengths = [len(policy.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
        prompt_tokens = sum(lengths) / len(prompts)
        step_bytes, step_flops = step_cost(policy.model, rows_n, len(prompts), prompt_tokens, args.max_new_tokens / 2)
        bandwidth, flops = memory_bandwidth_gb_s(), matmul_gflop_s(policy.model.dtype)
        step_s = max(step_bytes / (bandwidth * 1e9), step_flops / (flops * 1e9))
        result.update(bandwidth_gb_s=bandwidth, matmul_gflop_s=flops, step_gb=step_bytes / 1e9,
                      step_gflop=step_flops / 1e9, roofline_tokens_per_second=rows_n / step_s,
                      bound="memory" if step_bytes / bandwidth > step_flops / flops else "compute",
                      of_roofline=decode_rate * step_s / rows_n)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{args.questions} x {args.completions} rows x {args.max_new_tokens} tokens: {seconds:.1f} s "
          f"({prefill_s:.1f} s prefill), {tokens / seconds:.1f} tok/s, decoding {decode_rate:.1f} tok/s, "
          f"peak RSS {result['peak_rss_mb']:.0f} MB")
    if args.roofline:
        print(f"roofline: {result['step_gb']:.2f} GB and {result['step_gflop']:.1f} GFLOP a step; "
              f"{result['bandwidth_gb_s']:.1f} GB/s, {result['matmul_gflop_s']:.0f} GFLOP/s ({policy.model.dtype}); "
              f"{result['bound']}-bound at {result['roofline_tokens_per_second']:.1f} tok/s; "
              f"decoding reaches {result['of_roofline']:.2f} of it")


if __name__ == "__main__":
    main()
