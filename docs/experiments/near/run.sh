#!/bin/bash
# Each peer's group weighed in the draw by the share of that peer's recent completions of its
# family the node's updates kept within the 3-nat bound: the flag --weigh-draw-by-nearness, on a
# checkout of main at the commit that added it (git worktree add --detach RUN COMMIT).
# Two runs, each the 4/4:ab arm of another run's command, against that run's 8/0 and 4/4:ab:
#   the mixed swarm, docs/experiments/mixed/ab/current/run.sh, seeds MIXED (default 3 4 0 1 2);
#   equal nodes, docs/experiments/equal/run.sh, seeds EQUAL (default 0-2), 30 rounds.
# Rerun to resume each seed from its last checkpoint.
RUN=${RUN:-/work/wt/near}
HERE=$(dirname "$0")
RUN=$RUN OUT=/work/exp-out/near-mixed CONFIGS=4/4:ab SEEDS=${MIXED:-3 4 0 1 2} FLAGS=--weigh-draw-by-nearness \
  bash "$HERE/../mixed/ab/current/run.sh" &
RUN=$RUN OUT=/work/exp-out/near-equal CONFIGS=4/4:ab ROUNDS=30 SEEDS=${EQUAL:-0 1 2} FLAGS=--weigh-draw-by-nearness \
  bash "$HERE/../equal/run.sh" &
wait
