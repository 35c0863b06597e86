"""Where a forged key's words fall against the first bar, under each trained node of a run.

For every node of a first-bar run (its last checkpoint's adapter on SmolLM2-135M, and the bar
of its first update, which the checkpoint keeps), and 8 questions of the run's task set (seed
0, round 0), the mean log-prob per token, in the trained form of a peer's answer (answer tag
prefilled), of: the key; the key with words spliced in; and the words alone, as a sender who
forged the key to them would send them. A completion with a positive advantage stays in only
within ``peer_logprob_gap`` (the default, 3) nats of the first bar: the script counts the words that would.

Run: ``PYTHONPATH=. python docs/experiments/first-bar/junk.py RUN_DIR`` (RUN_DIR holds
``seed-N`` folders, as ``run.sh`` writes them). It loads the model once and takes about a
minute a node on one core.
"""

import json
import os
import statistics
import sys
from pathlib import Path

import torch

from benchmarks.peer_nearness import INJECTED, mean_logprobs
from swarmnode.config import NodeConfig
from swarmnode.node.checkpoint import latest_checkpoint
from swarmnode.train.model import load_base_model
from swarmnode.train.policy import Policy
from swarmnode.train.tasks import TaskSource, load_task_file

HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = os.path.join(HERE, "..", "equal", "tasks.toml")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    torch.set_num_threads(1)
    gap = NodeConfig().peer_logprob_gap
    assert gap is not None, "the default config bounds peers' completions"
    policy = Policy(load_base_model("smollm2-135m", torch.device("cpu")),
                    NodeConfig(model="smollm2-135m", tasks=TASKS, max_new_tokens=8))
    questions = TaskSource(load_task_file(TASKS), 0).sample(0, 8)

    def means(prompt: str, texts: list[str]) -> list[float]:
        return mean_logprobs(policy, prompt, [f"{t}</answer>" for t in texts])

    within, total = 0, 0
    print("node                      first bar | key  spliced  words alone (mean per token) | "
          f"words within {gap:g} nats")
    for home in sorted(Path(sys.argv[1]).glob("seed-*/nodes/*/*/node-*")):
        ckpt = latest_checkpoint(home / "checkpoints")
        if ckpt is None or ckpt.state.get("nearness_first") is None:
            continue
        policy.load_adapter_weights(ckpt.path / "adapter")
        first = float(ckpt.state["nearness_first"])
        kinds: dict[str, list[float]] = {"key": [], "spliced": [], "words": []}
        for q in questions:
            prompt = policy.prompt(q.question)
            kinds["key"] += means(prompt, [q.answer])
            kinds["spliced"] += means(prompt, [q.answer + w for w in INJECTED])
            kinds["words"] += means(prompt, [w.strip() for w in INJECTED])
        near = sum(m >= first - gap for m in kinds["words"])
        within, total = within + near, total + len(kinds["words"])
        name = "/".join(home.parts[-5:-4] + home.parts[-1:]) + f" round {ckpt.round}"
        print(f"{name:25} {first:9.2f} | " + "  ".join(f"{statistics.fmean(v):5.2f}" for v in kinds.values())
              + f" (highest words {max(kinds['words']):.2f}) | {near} of {len(kinds['words'])}")
    print(json.dumps({"words_within_first_bound": within, "of": total}))


if __name__ == "__main__":
    main()
