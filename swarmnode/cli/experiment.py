"""``swarmnode experiment``: the SAPO paper's local/external experiment on this machine.

The node settings take the same flags as ``swarmnode start`` (generated from
:class:`~swarmnode.config.NodeConfig`); a profile only changes their defaults, and the
experiment's own flags (configs, nodes, rounds, seeds, ...) follow.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path

from swarmnode.cli.flags import add_config_flags, given_flags
from swarmnode.config import NodeConfig, coerce, read_toml
from swarmnode.experiment.settings import PROFILES, ExperimentError, Settings
from swarmnode.node.logs import quiet_library_warnings

# Config keys a node of the experiment does not read: the run sets them (I/J and sampling per
# config, the round count) or they concern a node's files and network.
NOT_EXPERIMENT_KEYS = ("home", "log_level", "rounds", "local", "external", "external_sampling", "seed", "solo",
                       "transport", "swarm", "bootstrap", "bootstrap_file", "listen", "announce", "api_port",
                       "keep_checkpoints")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("experiment", help="run SAPO's local/external experiment on this machine",
                       description="N nodes on one shared base model exchange signed rollouts; compares "
                                   "local/external configs (I/J) by cumulative reward. Resumes when rerun "
                                   "with the same --out.")
    p.add_argument("--profile", choices=sorted(PROFILES), default="laptop",
                   help="defaults for the flags below: laptop (2 CPU cores, about 45 minutes) or paper (GPU)")
    p.add_argument("--nodes", help="nodes per config: a count (all on --model), or MODEL:N,... to mix models "
                                   "(catalogue names, embedded, Hugging Face ids or local directories), e.g. "
                                   "smollm2-135m:3,qwen2.5-coder-0.5b:1; each model is loaded once")
    p.add_argument("--configs", help="comma-separated I/J configs, e.g. 8/0,6/2,4/4,2/6; "
                                     "a suffix sets how external groups are drawn: ':rw' reward-weighted, ':lv' "
                                     "level-aware, ':ao' above-own, ':ab' above-best (4/4:ab)")
    p.add_argument("--rounds", type=int, help="rounds per seed (raise it to extend a finished run)")
    p.add_argument("--seeds", type=int, help="number of seeds (0..S-1, or from --first-seed)")
    p.add_argument("--first-seed", type=int,
                   help="number of the first seed: seeds K..K+S-1 run, to split a run's seeds over processes or "
                        "machines (each with its own --out; their tables combine)")
    p.add_argument("--families", help="comma-separated subset of the task file's families")
    p.add_argument("--checkpoint-every", type=int, help="rounds between checkpoints")
    p.add_argument("--time-limit", type=float, metavar="MINUTES", dest="time_limit_minutes",
                   help="stop after the round that passes this many minutes, checkpoint, and report "
                        "(rerun the same command to continue)")
    p.add_argument("--out", default="experiment-out", help="output directory (rerun with it to resume)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--report", action="store_true",
                   help="only write summary.md and rewards.png from the tables under --out (of a run stopped or "
                        "still going), running nothing")
    add_config_flags(p, exclude=NOT_EXPERIMENT_KEYS,
                     config_help="TOML file of node settings for every node (none by default: a node's own "
                                 "config.toml does not change an experiment)")
    p.set_defaults(func=cmd_experiment)


def node_config(args: argparse.Namespace, profile: dict) -> NodeConfig:
    """The profile's node settings, then ``--config``'s file, then the flags given."""
    values = dict(profile["node"])
    if args.config:
        for key, value in read_toml(Path(args.config).expanduser()).items():
            if key in NOT_EXPERIMENT_KEYS:
                raise ExperimentError(f"{args.config}: '{key}' is set by the experiment itself; remove it")
            values[key] = coerce(key, value, f"file:{args.config}")
    for key, value in given_flags(args).items():
        if key in NOT_EXPERIMENT_KEYS:  # --rounds is the experiment's own flag, not the node's key
            continue
        values[key] = coerce(key, value, f"flag:--{key.replace('_', '-')}", from_text=True)
    return NodeConfig(**values)


def settings_from_args(args: argparse.Namespace) -> Settings:
    profile = PROFILES[args.profile]
    values = {k: v for k, v in profile.items() if k != "node"}
    for key in ("nodes", "configs", "rounds", "seeds", "first_seed", "checkpoint_every"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    return Settings(profile=args.profile, node=node_config(args, profile), families=args.families,
                    out=str(Path(args.out).expanduser()), time_limit_minutes=args.time_limit_minutes, **values)


def _pick_model(s: Settings) -> Settings:
    """The profile's model where it can be had (``auto`` resolved for this machine), else the
    embedded one (with a note)."""
    from swarmnode.catalogue import catalogue_entry
    from swarmnode.node.modelchoice import resolve_model
    from swarmnode.train.fetch import ModelError

    try:
        spec = resolve_model(s.node.model, s.node.device)[0]
    except ModelError as exc:  # a device that is not there
        raise ExperimentError(str(exc)) from None
    s = dataclasses.replace(s, node=dataclasses.replace(s.node, model=spec))
    if catalogue_entry(spec) is not None or Path(spec).expanduser().is_dir():
        return s
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(spec)
    except Exception:  # no internet, no such model: the harness still runs with the embedded model
        print(f"swarmnode: model '{spec}' cannot be loaded here; using the embedded model", file=sys.stderr)
        return dataclasses.replace(s, node=dataclasses.replace(s.node, model="embedded"))
    return s


def cmd_experiment(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    quiet_library_warnings()
    try:
        s = _pick_model(settings_from_args(args))
        if s.node.threads:
            import torch

            torch.set_num_threads(s.node.threads)
        from swarmnode.experiment.runner import (
            Experiment,  # torch: loaded only when an experiment runs
        )

        experiment = Experiment(s, progress=not args.no_progress)
        summary = experiment.report() if args.report else experiment.run()
    except ExperimentError as exc:
        print(f"swarmnode: {exc}", file=sys.stderr)
        return 2
    print(summary.read_text())
    print(f"outputs in {summary.parent}")
    return 0
