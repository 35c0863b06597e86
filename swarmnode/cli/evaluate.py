"""``swarmnode eval``: score a node's policy on the fixed yardstick and print it."""

from __future__ import annotations

import argparse
import json
import sys

from swarmnode.cli.flags import add_config_flags, given_flags
from swarmnode.config import load_config
from swarmnode.paths import NodeHome


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="score the node's newest checkpoint on the fixed yardstick",
                       description="Score the policy of the node's newest checkpoint greedily on the fixed "
                                   "held-out yardstick (per family and level) and print it.")
    p.add_argument("--untrained", action="store_true", help="score the untrained policy (the base model) instead")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    add_config_flags(p)
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    loaded = load_config(given_flags(args), config_path=args.config)
    cfg = loaded.config
    # torch comes with these: imported only when eval runs (see cli/start.py)
    from swarmnode.node.evaluate import evaluate
    from swarmnode.node.modelchoice import prepare
    from swarmnode.train.model import ModelError
    from swarmnode.train.tasks import TaskConfigError, load_task_file

    try:
        load_task_file(cfg.tasks)  # a bad task file is said before a model is fetched
        # the node's own tasks: those of its model's round where the config sets none
        record = evaluate(prepare(cfg, loaded.sources), NodeHome.resolve(cfg.home), untrained=args.untrained)
    except (TaskConfigError, ModelError) as exc:
        print(f"swarmnode: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(record, indent=2, sort_keys=True))
        return 0
    print(f"yardstick after {record['round']} rounds: {record['score']:.3f} greedy on {record['questions']} "
          f"held-out questions ({record['seconds']:.1f} s)")
    for key, value in record["by_level"].items():
        family, level = key.rsplit(":", 1)
        print(f"  {family:<26} level {level:>4}  {value:.3f}")
    return 0
