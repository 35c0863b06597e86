#!/bin/bash
# The equal-nodes experiment's 4/4:ab arm with peers' completions held to the lowest bar the
# receiver's own completions have had (lowest-bar.patch on ef45351's training path: commit
# af9333a of these runs), one process per seed, with docs/experiments/equal/run.sh's flags; that
# run's 8/0 arm is its baseline (a node that draws no peer's group runs the same on either bar).
# RUN: a worktree of main with the patch applied (git worktree add RUN && git -C RUN apply
# docs/experiments/bar/lowest-bar.patch). Rerun to resume each seed from its last checkpoint.
RUN=${RUN:-/work/wt/lever} OUT=${OUT:-/work/exp-out/lever} CONFIGS=4/4:ab \
  exec bash "$(dirname "$0")/../equal/run.sh"
