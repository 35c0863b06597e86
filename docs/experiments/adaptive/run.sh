#!/bin/bash
# The mixed swarm with every node's levels moving with its own rewards, as a Qwen node's
# defaults have them (adaptive_difficulty on, each family from its lowest level): both arms,
# 8/0 and 4/4:ab, of docs/experiments/mixed/ab/current/run.sh with --adaptive-difficulty after
# its --no-adaptive-difficulty, on a checkout of main (git worktree add --detach RUN COMMIT).
# Seeds SEEDS (default 0 1 2; the README's five: SEEDS="0 1 2 3 4"). Rerun to resume each seed
# from its last checkpoint.
RUN=${RUN:-/work/wt/adaptive}
HERE=$(dirname "$0")
RUN=$RUN OUT=/work/exp-out/adaptive-mixed CONFIGS=8/0,4/4:ab SEEDS=${SEEDS:-0 1 2} FLAGS=--adaptive-difficulty \
  bash "$HERE/../mixed/ab/current/run.sh"
