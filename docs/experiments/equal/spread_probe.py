"""Would more completions, or a hotter sampler, give a trained node's own groups back their spread?

For the untrained model and each node's last checkpoint of seeds 0-2: 16 completions of each of
32 questions (8 a family, at the task file's levels, from a task stream no node trained on),
at temperature 1.0 (the node's) and 1.3, scored by the node's verifier. The 16 are cut into
groups of 4 (the round's), 8 or 16, and the share of groups with a spread of rewards (the ones
that carry an advantage) is printed, with the share of completions fully right. A row is
appended to OUT per model as it finishes, so a rerun resumes; then each arm's means.

Run: ``PYTHONPATH=. python docs/experiments/equal/spread_probe.py OUT [RUN]`` (RUN: the equal
run's output folder, ``/work/exp-out/equal`` by default; its checkpoints are not published).
"""

import json
import statistics as st
import sys
import time
from pathlib import Path

import torch

from swarmnode.config import NodeConfig
from swarmnode.experiment.runner import pinned_questions
from swarmnode.node.checkpoint import list_checkpoints
from swarmnode.node.round import derive_seed, score_local
from swarmnode.train.answers import TokenBudget
from swarmnode.train.model import load_base_model, pick_device
from swarmnode.train.policy import Policy
from swarmnode.train.tasks import Scorer, TaskSource, load_task_file

HERE = Path(__file__).resolve().parent
SAMPLES, PER_FAMILY = 16, 8
TEMPERATURES, SIZES = (1.0, 1.3), (4, 8, 16)


def main() -> None:
    out = Path(sys.argv[1])
    run = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("/work/exp-out/equal")
    torch.set_num_threads(1)
    tasks = str(HERE / "tasks.toml")
    cfg = NodeConfig(model="smollm2-135m", tasks=tasks, adaptive_difficulty=False, completions=4,
                     max_new_tokens=8, learning_rate=2e-4, device="cpu", dtype="float32")
    families = load_task_file(tasks)
    base = load_base_model(cfg.model, pick_device(cfg.device), torch.float32)
    policy = Policy(base, cfg, adapter="probe")
    scorer = Scorer(families)
    scorer.budget = TokenBudget(base.tokenizer, cfg.max_new_tokens, cfg.prefill_answer_tag)
    source = TaskSource(families, derive_seed("spread-probe"))
    questions = pinned_questions(source, PER_FAMILY)
    prompts = [policy.prompt(q.question) for q in questions]

    done = {(r["seed"], r["arm"], r["node"]) for r in map(json.loads, out.read_text().splitlines())} \
        if out.exists() else set()
    # The untrained model first: the policy's fresh adapter is still the identity then.
    models = [(None, "untrained", None)] + [(s, a, k) for s in (0, 1, 2) for a in ("8-0", "4-4-ab") for k in range(4)]
    for seed, arm, node in models:
        if (seed, arm, node) in done:
            continue
        started = time.time()
        if seed is not None:
            _, path = list_checkpoints(run / f"seed-{seed}/nodes/seed-{seed}/{arm}/node-{node}/checkpoints")[-1]
            policy.load_adapter_weights(path / "adapter")
        row: dict = {"seed": seed, "arm": arm, "node": node}
        for temperature in TEMPERATURES:
            torch.manual_seed(derive_seed(f"probe:{seed}{arm}{node}:{temperature}"))
            gen = policy.generate(prompts, SAMPLES, max_new_tokens=cfg.max_new_tokens, temperature=temperature)
            groups = score_local(questions, gen, scorer, cfg.prefill_answer_tag)
            for size in SIZES:
                cuts = [g.rewards[i:i + size] for g in groups for i in range(0, SAMPLES, size)]
                row[f"T{temperature} K{size}"] = sum(len(set(c)) > 1 for c in cuts) / len(cuts)
            row[f"T{temperature} right"] = sum(r == 1.0 for g in groups for r in g.rewards) / (len(groups) * SAMPLES)
        row["seconds"] = round(time.time() - started, 1)
        print(json.dumps(row), flush=True)
        with out.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
    summarize([json.loads(line) for line in out.read_text().splitlines()])


def summarize(rows: list[dict]) -> None:
    """Each measure's mean over the nodes of an arm (all seeds), against the untrained model's."""
    measures = [k for k in rows[0] if k.startswith("T")]
    print("\narm | " + " | ".join(measures))
    for arm in ("untrained", "8-0", "4-4-ab"):
        mine = [r for r in rows if r["arm"] == arm]
        if mine:
            print(f"{arm} ({len(mine)}) | " + " | ".join(f"{st.fmean(r[m] for r in mine):.3f}" for m in measures))


if __name__ == "__main__":
    main()
