"""Sampling at its worst for memory: every row runs to the token limit (no stop string, no EOS).

A real round's length varies with how many completions close their answer early, so its peak
RSS does too; this fixed workload (round 0's questions of the packaged tasks, Q x L rows of
exactly ``--max-new-tokens`` tokens, through ``swarmnode.train.sampler.sample``) gives the same
tokens on every run and tree, for comparisons of decoding memory and speed::

    PYTHONPATH=. python benchmarks/decode_peak.py --max-new-tokens 128
    PYTHONPATH=. python benchmarks/ab.py --tree before=/tmp/before --tree after=. --pairs 2 -- \\
        benchmarks/decode_peak.py --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import add_size_args, bench_config, build_solo_node, peak_rss_mb

from swarmnode.train.sampler import sample

_NEVER = "\x00swarmnode: never generated\x00"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_args(ap, threads=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    cfg = bench_config(questions=args.questions, completions=args.completions, max_new_tokens=args.max_new_tokens,
                       threads=args.threads, model=args.model)
    node = build_solo_node(cfg)
    policy = node.policy
    prompts = [policy.prompt(q.question) for q in node.tasks.sample(0, args.questions)]
    policy.model.eval()
    torch.manual_seed(0)
    t0 = time.perf_counter()
    rows = sample(policy.model, policy.tokenizer, prompts, args.completions, max_new_tokens=args.max_new_tokens,
                  temperature=cfg.temperature, stop_string=_NEVER, eos_id=None, token_texts=policy.token_texts,
                  device=policy.device)
    seconds = time.perf_counter() - t0
    tokens = sum(len(r) for r in rows)
    result = {"seconds": seconds, "tokens_generated": tokens, "tokens_per_second": tokens / seconds,
              "peak_rss_mb": peak_rss_mb()}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{args.questions} x {args.completions} rows x {args.max_new_tokens} tokens: {seconds:.1f} s, "
          f"{tokens / seconds:.1f} tok/s, peak RSS {result['peak_rss_mb']:.0f} MB")


if __name__ == "__main__":
    main()
