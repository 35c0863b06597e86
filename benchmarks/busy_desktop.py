"""A node beside the user's work: the thread policy against every fixed thread count, and the user's program.

Three conditions: the machine otherwise idle, one core kept busy by another program, and a
bursty program (busy ``--burst-s``, idle as long, over and over). In each, a fixed decoding
workload (round 0's questions of the packaged tasks, Q x L rows of exactly
``--max-new-tokens`` tokens, ``--repeats`` times, as a node does round after round) runs
with the node's default policy (``auto``: ``swarmnode.node.threads.ThreadPolicy``, re-checked
between repeats and at each one's start) and with each fixed count from 1 to the cores.
The node side always runs at the node's default background priority; the competing program
at normal priority, as the user's programs do. The competing program counts loop iterations
per second of its busy time, alone and beside each node run.

Runs alternate (every condition and policy once per pass, ``--passes`` passes); medians.
One worker process holds the model for every run (so each run costs only its decoding)::

    PYTHONPATH=. python benchmarks/busy_desktop.py              # the default run (about 7 min on 2 cores)
    PYTHONPATH=. python benchmarks/busy_desktop.py --passes 1 --repeats 1 --max-new-tokens 4   # a smoke run

Targets: beside a busy core the default reaches >= 0.9x the best fixed count's
tokens per second; alone >= 0.95x; the competing program keeps >= 0.8x of its throughput alone.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from common import median

CONDITIONS = ("alone", "busy core", "bursty")
_RESULT = "RESULT "
_NEVER = "\x00swarmnode: never generated\x00"


# -- the competing program --------------------------------------------------------------------


def competitor(mode: str, burst_s: float) -> None:
    """Spin in pure Python (``busy``: always; ``bursty``: ``burst_s`` on, ``burst_s`` off) until
    SIGTERM; then print iterations per second of busy time."""
    stop = False

    def on_term(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    count, busy = 0, 0.0
    while not stop:
        t0 = time.perf_counter()
        end = t0 + (burst_s if mode == "bursty" else 0.2)
        while time.perf_counter() < end and not stop:
            for _ in range(20_000):
                pass
            count += 20_000
        busy += time.perf_counter() - t0
        if mode == "bursty" and not stop:
            time.sleep(burst_s)
    print(json.dumps({"per_s": count / busy if busy else 0.0}), flush=True)


class Competitor:
    """The competing program as a child process at normal priority."""

    def __init__(self, mode: str, burst_s: float):
        self.proc = subprocess.Popen([sys.executable, __file__, "--competitor", mode, "--burst-s", str(burst_s)],
                                     stdout=subprocess.PIPE, text=True)

    def stop(self) -> float:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        return json.loads(out.strip().splitlines()[-1])["per_s"]


# -- the node side --------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    """Load the model once at background priority; then, per JSON command on stdin
    (``{"threads": N}``, 0 for the policy), decode the workload and print one result line."""
    import torch

    from common import bench_config, build_solo_node
    from swarmnode.node.priority import apply_priority
    from swarmnode.node.threads import ThreadPolicy
    from swarmnode.train.sampler import sample

    print(_RESULT + json.dumps({"priority": apply_priority(args.node_priority)}), flush=True)
    cfg = bench_config(questions=args.questions, completions=args.completions, max_new_tokens=args.max_new_tokens,
                       model=args.model)
    node = build_solo_node(cfg)
    policy_model = node.policy
    prompts = [policy_model.prompt(q.question) for q in node.tasks.sample(0, args.questions)]
    policy_model.model.eval()
    print(_RESULT + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        threads = json.loads(line)["threads"]
        policy = ThreadPolicy(threads)
        policy.start()
        tokens, seconds, used = 0, 0.0, []
        deadline = time.perf_counter() + args.run_limit_s
        for _ in range(args.repeats):
            if time.perf_counter() > deadline:
                break
            used.append(policy.check_phase())
            torch.manual_seed(0)
            t0 = time.perf_counter()
            rows = sample(policy_model.model, policy_model.tokenizer, prompts, args.completions,
                          max_new_tokens=args.max_new_tokens, temperature=cfg.temperature, stop_string=_NEVER,
                          eos_ids=(), token_texts=policy_model.token_texts, device=policy_model.device,
                          should_stop=lambda: time.perf_counter() > deadline)
            dt = time.perf_counter() - t0
            n = sum(len(r) for r in rows)
            tokens, seconds = tokens + n, seconds + dt
            policy.end_round(n / dt)
        print(_RESULT + json.dumps({"tokens_per_second": tokens / seconds, "threads_used": used,
                                    "cut": time.perf_counter() > deadline}), flush=True)


class Worker:
    def __init__(self, argv: list[str]):
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", *argv], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.priority = self._read()["priority"]
        self._read()  # ready

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(_RESULT):
                return json.loads(line[len(_RESULT):])
        raise SystemExit(f"the worker exited with status {self.proc.wait()}")

    def run(self, threads: int) -> dict:
        self.proc.stdin.write(json.dumps({"threads": threads}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# -- the run ----------------------------------------------------------------------------------


def measure(args: argparse.Namespace, worker: Worker, policies: list[int]) -> tuple[dict, dict]:
    """Per (condition, policy): tokens/s and competitor throughput per pass; the competitor alone per pass."""
    runs: dict[tuple[str, int], list[dict]] = {}
    alone: dict[str, list[float]] = {"busy core": [], "bursty": []}
    for p in range(args.passes):
        for condition in CONDITIONS:
            mode = {"busy core": "busy", "bursty": "bursty"}.get(condition)
            if mode:
                comp = Competitor(mode, args.burst_s)
                time.sleep(args.alone_s)
                alone[condition].append(comp.stop())
            order = policies if p % 2 == 0 else policies[::-1]
            for threads in order:
                comp = Competitor(mode, args.burst_s) if mode else None
                if comp:
                    time.sleep(1.0)  # the program is running when the node starts
                res = worker.run(threads)
                if comp:
                    res["competitor_per_s"] = comp.stop()
                runs.setdefault((condition, threads), []).append(res)
                name = "auto" if threads == 0 else str(threads)
                cut = " (cut at --run-limit-s)" if res["cut"] else ""
                competitor = f", competitor {res['competitor_per_s'] / 1e6:.1f} M it/s" if comp else ""
                print(f"pass {p + 1} {condition:9s} {name:>4s}: {res['tokens_per_second']:6.1f} tok/s, threads "
                      f"{res['threads_used']}{cut}{competitor}", flush=True)
    return runs, alone


def report(runs: dict, alone: dict, policies: list[int]) -> list[str]:
    lines = [f"{'condition':10s} {'policy':>6s} {'tok/s':>7s} {'vs best fixed':>13s} {'threads used':>14s} "
             f"{'competitor kept':>15s}"]
    verdicts = []
    for condition in CONDITIONS:
        tps = {t: median([r["tokens_per_second"] for r in runs[(condition, t)]]) for t in policies}
        best = max(tps[t] for t in policies if t)
        for t in policies:
            kept = ""
            if alone.get(condition):
                kept_ratio = median([r["competitor_per_s"] for r in runs[(condition, t)]]) / median(alone[condition])
                kept = f"{kept_ratio:.2f}x"
                if t == 0:
                    verdicts.append((f"{condition}: competitor keeps >= 0.8x", kept_ratio, 0.8))
            used = sorted({n for r in runs[(condition, t)] for n in r["threads_used"]})
            lines.append(f"{condition:10s} {'auto' if t == 0 else t:>6} {tps[t]:7.1f} {tps[t] / best:12.2f}x "
                         f"{','.join(map(str, used)):>14s} {kept:>15s}")
        target = {"alone": 0.95, "busy core": 0.9}.get(condition)
        if target:
            verdicts.insert(0, (f"{condition}: auto >= {target}x best fixed", tps[0] / best, target))
    lines.append("")
    lines += [f"{'PASS' if value >= target else 'MISS'}  {name}: {value:.2f}x" for name, value, target in verdicts]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--completions", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3, help="workload runs per measurement (rounds of a node)")
    ap.add_argument("--passes", type=int, default=2, help="every condition and policy once per pass")
    ap.add_argument("--burst-s", type=float, default=1.0, help="the bursty program's busy (and idle) stretch")
    ap.add_argument("--alone-s", type=float, default=5.0, help="seconds the competitor runs alone per pass")
    ap.add_argument("--run-limit-s", type=float, default=60.0,
                    help="a run that takes longer is cut there and its rate taken from the tokens it made "
                         "(at background priority, more threads than free cores can be 100x slower)")
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--node-priority", choices=("background", "normal"), default="background",
                    help="the node side's priority (the node's default is background; 'normal' only to check "
                         "the script on a machine too loaded for a background process to get the CPU)")
    ap.add_argument("--competitor", choices=("busy", "bursty"), help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.competitor:
        return competitor(args.competitor, args.burst_s)
    if args.worker:
        return worker(args)

    from swarmnode.node.threads import physical_cores

    policies = [0, *range(1, physical_cores() + 1)]
    t0, load_before = time.perf_counter(), os.getloadavg()[0]
    passed = [f"--questions={args.questions}", f"--completions={args.completions}",
              f"--max-new-tokens={args.max_new_tokens}", f"--repeats={args.repeats}", f"--model={args.model}",
              f"--node-priority={args.node_priority}", f"--run-limit-s={args.run_limit_s}"]
    node = Worker(passed)
    try:
        runs, alone = measure(args, node, policies)
    finally:
        node.close()
    print(f"\n{args.questions} x {args.completions} rows x {args.max_new_tokens} tokens, {args.repeats} repeats, "
          f"{args.passes} passes, node at {node.priority}, 1-minute load before {load_before:.2f}, "
          f"{time.perf_counter() - t0:.0f} s")
    print("\n".join(report(runs, alone, policies)))


if __name__ == "__main__":
    main()
