"""One swarmnode round against one step of TRL's GRPOTrainer doing the same work.

Same machine, model (embedded SmolLM2-135M by default), questions (round 0 of a
:class:`~swarmnode.train.tasks.TaskSource` with the packaged task file), prompt (``build_prompt``
with the prefilled ``<answer>``), reward (the node's :class:`~swarmnode.train.tasks.Scorer`),
Q questions x L completions x T max new tokens, stop at ``</answer>`` or EOS, temperature 1,
LoRA r/alpha/targets, AdamW lr, beta 0, asymmetric clip, one update, and the frozen weights'
precision (``--dtype``, the node's setting: ``auto`` resolves as a CPU node's does, for both). Each run is its own
process, so each side's peak RSS is its own; runs alternate swarmnode, TRL, swarmnode, TRL
so a shared machine's noise hits both alike. Times exclude model loading on both sides. Each run
reports wall seconds and CPU seconds (the process's, every thread): beside other work the wall
time stretches with the competition, the CPU time much less, so its ratio is the steadier one.

TRL is a benchmark-only dependency: ``pip install 'swarmnode[bench]'`` (trl, psutil).
Usage, from the repository root::

    PYTHONPATH=. python benchmarks/round_vs_trl.py [--pairs 3] [--questions 8] [--completions 8]
        [--max-new-tokens 256] [--threads 2] [--model embedded|DIR] [--memory-limit-gb 16]

``--memory-limit-gb`` caps each run's address space (``RLIMIT_AS``), so a side that would
take more memory than a shared machine has fails with an allocation error, reported as such,
instead of waking the kernel's OOM killer on other people's processes.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from common import add_size_args, bench_config, build_solo_node, median, peak_rss_mb

SIDES = ("swarmnode", "trl")
MEASURES = ("seconds", "cpu_seconds", "tokens_per_second", "peak_rss_mb")


def run_swarmnode(args: argparse.Namespace) -> dict:
    cfg = bench_config(questions=args.questions, completions=args.completions,
                       max_new_tokens=args.max_new_tokens, threads=args.threads, model=args.model, dtype=args.dtype)
    node = build_solo_node(cfg, seed=args.seed)
    cpu0 = time.process_time()
    row = node.run_round(0)
    return {"seconds": row.seconds, "cpu_seconds": time.process_time() - cpu0,
            "tokens": row.tokens_generated, "reward_mean": row.reward_mean,
            "seconds_generate": row.seconds_generate, "seconds_train": row.seconds_train}


def run_trl(args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from swarmnode.compat import onednn
    from swarmnode.train.answers import ANSWER_CLOSE
    from swarmnode.train.model import KERNEL_CACHE_CAPACITY, pick_dtype, prepare_model
    from swarmnode.train.tasks import Scorer, TaskSource, build_prompt, full_response, load_task_file

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = bench_config(questions=args.questions, completions=args.completions, max_new_tokens=args.max_new_tokens)
    dtype = pick_dtype(torch.device("cpu"), args.dtype)
    if dtype == torch.bfloat16:  # the node's own bound on oneDNN's kernels, so the two differ by trainer only
        onednn.cap_kernel_caches(KERNEL_CACHE_CAPACITY)
    source = prepare_model(args.model, dtype=dtype).path
    tokenizer = AutoTokenizer.from_pretrained(source)
    # generate() pads a row that stopped at the stop string with the padding token, and TRL ends
    # a completion at its first EOS only: with Qwen2.5's own padding token (<|endoftext|>, not
    # its EOS) TRL counted and trained those pads as completion tokens. Padding with EOS makes
    # them the end.
    tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    families = load_task_file(cfg.tasks)
    questions = TaskSource(families, args.seed).sample(0, cfg.questions)
    scorer = Scorer(families)
    dataset = Dataset.from_list([{"prompt": build_prompt(tokenizer, q.question, cfg.prefill_answer_tag), "index": i}
                                 for i, q in enumerate(questions)])

    seen: list[tuple[str, float]] = []

    def reward(completions, index, **_):
        rewards = [scorer.score(questions[i], full_response(c, cfg.prefill_answer_tag)) or 0.0
                   for c, i in zip(completions, index)]
        seen.extend(zip(completions, rewards))
        return rewards

    out_dir = tempfile.mkdtemp(prefix="trl-bench-")
    targs = GRPOConfig(
        output_dir=out_dir, report_to="none", use_cpu=True, save_strategy="no", logging_steps=1, max_steps=1,
        seed=args.seed, per_device_train_batch_size=cfg.questions * cfg.completions,
        num_generations=cfg.completions, steps_per_generation=1, gradient_accumulation_steps=1,
        max_completion_length=cfg.max_new_tokens, temperature=cfg.temperature, top_p=1.0, top_k=0,
        beta=0.0, num_iterations=1, epsilon=cfg.eps_low, epsilon_high=cfg.eps_high, loss_type="dapo",
        learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm,
        lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", shuffle_dataset=False,
        generation_kwargs={"stop_strings": [ANSWER_CLOSE]}, dataloader_num_workers=0)
    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_target_modules), task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=targs, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=lora)
    # transformers needs the tokenizer to match stop strings; TRL's generate call does not pass it.
    trainer.model.generate = functools.partial(trainer.model.generate, tokenizer=tokenizer)
    t0, cpu0 = time.perf_counter(), time.process_time()
    trainer.train()
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - cpu0
    logged = next(h for h in trainer.state.log_history if "completions/mean_length" in h)
    print("TRL's first completions:", [c for c, _ in seen[:3]], file=sys.stderr)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds,
            "tokens": logged["completions/mean_length"] * cfg.questions * cfg.completions,
            "reward_mean": sum(r for _, r in seen) / len(seen),
            "closed": sum(ANSWER_CLOSE in c for c, _ in seen) / len(seen)}


def measure(args: argparse.Namespace) -> None:
    """One run; an allocation refused under ``--memory-limit-gb`` prints the error and the peak it reached."""
    try:
        result = run_swarmnode(args) if args.side == "swarmnode" else run_trl(args)
    except (MemoryError, RuntimeError) as exc:
        if not isinstance(exc, MemoryError) and "alloc" not in str(exc):
            raise
        print(json.dumps({"failed": f"{type(exc).__name__}: {str(exc)[:300]}", "peak_rss_mb": peak_rss_mb()}))
        raise SystemExit(3) from None
    result["peak_rss_mb"] = peak_rss_mb()
    result["tokens_per_second"] = result["tokens"] / result["seconds"]
    print(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="swarmnode/TRL run pairs, alternated")
    add_size_args(ap, threads=2)  # the same torch threads on both sides
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--memory-limit-gb", type=float, default=0, help="address-space cap of each run (0: none)")
    ap.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # one measured run, in this process
    args = ap.parse_args()
    if args.side:
        if args.memory_limit_gb:
            limit = int(args.memory_limit_gb * 1e9)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        measure(args)
        return
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    argv = [f"--questions={args.questions}", f"--completions={args.completions}",
            f"--max-new-tokens={args.max_new_tokens}", f"--threads={args.threads}", f"--model={args.model}",
            f"--seed={args.seed}", f"--memory-limit-gb={args.memory_limit_gb}", f"--dtype={args.dtype}"]
    for i in range(args.pairs):
        for side in SIDES:
            proc = subprocess.run([sys.executable, __file__, *argv, "--side", side], capture_output=True, text=True,
                                  env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
            last = (proc.stdout.strip().splitlines() or ["{}"])[-1]
            if proc.returncode != 0:
                reached = json.loads(last) if proc.returncode == 3 else {"failed": proc.stderr[-3000:]}
                print(f"pair {i + 1} {side:9s}: failed: {reached['failed']}; peak RSS "
                      f"{reached.get('peak_rss_mb', float('nan')):.0f} MB", flush=True)
                raise SystemExit(1)
            res = json.loads(last)
            runs[side].append(res)
            print(f"pair {i + 1} {side:9s}: {res['seconds']:7.1f} s ({res['cpu_seconds']:7.1f} CPU-s), "
                  f"{res['tokens']:6.0f} tokens, {res['tokens_per_second']:6.1f} tok/s, "
                  f"peak RSS {res['peak_rss_mb']:6.0f} MB", flush=True)
    med = {side: {k: median([r[k] for r in runs[side]]) for k in MEASURES} for side in SIDES}
    print(f"\nmedians over {args.pairs} pairs, {args.questions} questions x {args.completions} completions x "
          f"{args.max_new_tokens} max new tokens, {args.threads} threads:")
    print(f"{'':20s}{'swarmnode':>12s}{'TRL':>12s}{'ratio':>8s}")
    for k in MEASURES:
        a, b = med["swarmnode"][k], med["trl"][k]
        print(f"{k:20s}{a:12.1f}{b:12.1f}{a / b:8.2f}")


if __name__ == "__main__":
    main()
