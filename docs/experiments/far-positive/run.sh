#!/bin/bash
# The equal-nodes experiment's 4/4:ab arm on main's rule for far completions (a peer's completion
# beyond the nearness bound trained when its advantage is positive: 4534893 and the commits
# after it), one process per seed, with docs/experiments/equal/run.sh's flags; that run's 8/0
# arm is its baseline (a node that draws no peer's group runs the same under either rule).
# RUN: a worktree of main at 14048a9 (git worktree add --detach RUN 14048a9). Rerun to resume
# each seed from its last checkpoint; ROUNDS=N extends it (the published tables: 30).
RUN=${RUN:-/work/wt/posfar} OUT=${OUT:-/work/exp-out/posfar} CONFIGS=4/4:ab ROUNDS=${ROUNDS:-100} \
  exec bash "$(dirname "$0")/../equal/run.sh"
