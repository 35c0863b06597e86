#!/bin/bash
# A peer's groups of a family passed over by the draw for 4 rounds after an update left most of
# that peer's completions of it beyond the 3-nat bound: --skip-far-peer-rounds 4, on a checkout
# of main at the commit that added it (git worktree add --detach RUN COMMIT). The 4/4:ab arm
# of the mixed swarm's command (docs/experiments/mixed/ab/current/run.sh), seeds MIXED
# (default 3 4 0 1 2), against that run's 8/0 and 4/4:ab. Rerun to resume each seed.
RUN=${RUN:-/work/wt/skip}
HERE=$(dirname "$0")
RUN=$RUN OUT=/work/exp-out/skip-mixed CONFIGS=4/4:ab SEEDS=${MIXED:-3 4 0 1 2} FLAGS="--skip-far-peer-rounds 4" \
  bash "$HERE/../mixed/ab/current/run.sh"
