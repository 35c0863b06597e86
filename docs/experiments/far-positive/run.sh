#!/bin/bash
# The equal-nodes experiment's 4/4:ab arm with a peer's completion beyond the nearness bound
# trained when its advantage is positive (far-positive.patch on main's training path: commit
# 3daf783 of these runs), one process per seed, with docs/experiments/equal/run.sh's flags; that
# run's 8/0 arm is its baseline (a node that draws no peer's group runs the same either way).
# RUN: a worktree of main with the patch applied (git worktree add RUN && git -C RUN apply
# docs/experiments/far-positive/far-positive.patch). Rerun to resume each seed from its last
# checkpoint; ROUNDS=N extends it (the published tables: 30).
RUN=${RUN:-/work/wt/posfar} OUT=${OUT:-/work/exp-out/posfar} CONFIGS=4/4:ab ROUNDS=${ROUNDS:-30} \
  exec bash "$(dirname "$0")/../equal/run.sh"
