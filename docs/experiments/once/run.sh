#!/bin/bash
# A drawn peer's group leaves the pool, so it trains a node once: once.patch on main's pool,
# commit 8479646 of these runs (git worktree add --detach RUN d423257 && git -C RUN apply
# docs/experiments/once/once.patch). On main the same is the flag --no-reuse-peer-groups.
# Two runs, each the 4/4:ab arm of another run's command, against that run's 8/0 and 4/4:ab:
#   the mixed swarm, docs/experiments/mixed/ab/current/run.sh, seeds MIXED (default 0-4);
#   equal nodes, docs/experiments/equal/run.sh, seeds EQUAL (default 0-2), 30 rounds.
# Rerun to resume each seed from its last checkpoint.
RUN=${RUN:-/work/wt/once}
HERE=$(dirname "$0")
RUN=$RUN OUT=/work/exp-out/once-mixed CONFIGS=4/4:ab SEEDS=${MIXED:-0 1 2 3 4} \
  bash "$HERE/../mixed/ab/current/run.sh" &
RUN=$RUN OUT=/work/exp-out/once CONFIGS=4/4:ab ROUNDS=30 SEEDS=${EQUAL:-0 1 2} bash "$HERE/../equal/run.sh" &
wait
