#!/bin/bash
# The equal-nodes experiment's 4/4:ab arm with a peer's completion that has a positive advantage
# held to the bar of the node's first update, every other to the bar as it is (first-bar.patch
# on main's training path: commit 8d3f3d9 of these runs), one process per seed, with
# docs/experiments/equal/run.sh's flags; that run's 8/0 arm is its baseline.
# RUN: a worktree of main with the patch applied (git worktree add RUN && git -C RUN apply
# docs/experiments/first-bar/first-bar.patch). Rerun to resume each seed from its last
# checkpoint; ROUNDS=N extends it (the published tables: 30).
RUN=${RUN:-/work/wt/poslow} OUT=${OUT:-/work/exp-out/poslow} CONFIGS=4/4:ab ROUNDS=${ROUNDS:-30} \
  exec bash "$(dirname "$0")/../equal/run.sh"
