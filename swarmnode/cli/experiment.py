"""``swarmnode experiment``: the SAPO paper's local/external experiment on this machine."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path

from swarmnode.experiment.runner import PROFILES, Experiment, ExperimentError, Settings


# ---- command line ---------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("experiment", help="run SAPO's local/external experiment on this machine",
                       description="N nodes on one shared base model exchange signed rollouts; compares "
                                   "local/external configs (I/J) by cumulative reward. Resumes when rerun "
                                   "with the same --out.")
    p.add_argument("--profile", choices=sorted(PROFILES), default="laptop",
                   help="defaults for the flags below: laptop (2 CPU cores, about 45 minutes) or paper (GPU)")
    p.add_argument("--nodes", type=int, help="nodes per config")
    p.add_argument("--configs", help="comma-separated I/J configs, e.g. 8/0,6/2,4/4,2/6; "
                                     "a ':rw' suffix draws external groups reward-weighted (4/4:rw)")
    p.add_argument("--rounds", type=int, help="rounds per seed (raise it to extend a finished run)")
    p.add_argument("--seeds", type=int, help="number of seeds (0..S-1)")
    p.add_argument("--questions", type=int, help="questions per node and round (B)")
    p.add_argument("--completions", type=int, help="completions per question (L)")
    p.add_argument("--max-new-tokens", type=int, help="token limit of one completion")
    p.add_argument("--model", help="'embedded', a Hugging Face id or a local model directory")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--task-file", help="task TOML file; 'laptop' is the packaged tasks-laptop.toml (easy "
                                       "families where the embedded model learns); default: the profile's")
    p.add_argument("--tasks", help="comma-separated subset of the task file's families")
    p.add_argument("--learning-rate", type=float)
    p.add_argument("--micro-batch", type=int, help="sequences per forward/backward pass")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--generation", choices=("batched", "per-node"),
                   help="one mixed-adapter batch for all nodes (faster on a GPU), or one batch per node "
                        "(faster on a CPU)")
    p.add_argument("--checkpoint-every", type=int, help="rounds between checkpoints")
    p.add_argument("--time-limit", type=float, metavar="MINUTES", dest="time_limit_minutes",
                   help="stop after the round that passes this many minutes, checkpoint, and report "
                        "(rerun the same command to continue)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch decides)")
    p.add_argument("--out", default="experiment-out", help="output directory (rerun with it to resume)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_experiment)


def settings_from_args(args: argparse.Namespace) -> Settings:
    values = dict(PROFILES[args.profile])
    for key in ("nodes", "configs", "rounds", "seeds", "questions", "completions", "max_new_tokens", "model",
                "task_file", "learning_rate", "micro_batch", "checkpoint_every", "generation"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    s = Settings(profile=args.profile, device=args.device, tasks=args.tasks, temperature=args.temperature,
                 out=str(Path(args.out).expanduser()), time_limit_minutes=args.time_limit_minutes, **values)
    for key in ("nodes", "rounds", "seeds", "questions", "completions", "max_new_tokens", "micro_batch",
                "checkpoint_every"):
        if getattr(s, key) < 1:
            raise ExperimentError(f"--{key.replace('_', '-')} must be >= 1")
    if s.nodes < 2 and any(a.external for a in s.arms):
        raise ExperimentError("configs with J > 0 need --nodes 2 or more")
    return s


def _pick_model(s: Settings) -> Settings:
    """The paper profile's model where it can be loaded, else the embedded one (with a note)."""
    if s.model == "embedded" or Path(s.model).expanduser().is_dir():
        return s
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(s.model)
    except Exception:  # no internet, no such model: the harness still runs with the embedded model
        print(f"swarmnode: model '{s.model}' cannot be loaded here; using the embedded model",
              file=sys.stderr)
        return dataclasses.replace(s, model="embedded")
    return s


def cmd_experiment(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        s = _pick_model(settings_from_args(args))
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        summary = Experiment(s, progress=not args.no_progress).run()
    except ExperimentError as exc:
        print(f"swarmnode: {exc}", file=sys.stderr)
        return 2
    print(summary.read_text())
    print(f"outputs in {summary.parent}")
    return 0
