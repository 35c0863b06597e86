#!/bin/bash
# The equal-nodes experiment's 4/4:ab arm with a peer's completion beyond the nearness bound
# trained when this node's verifier scored it fully right and its advantage is positive
# (far-right.patch on main's training path: commit d12a47a of these runs), one process per
# seed, with docs/experiments/equal/run.sh's flags; that run's 8/0 arm is its baseline.
# RUN: a worktree of main with the patch applied (git worktree add RUN && git -C RUN apply
# docs/experiments/far-right/far-right.patch). Rerun to resume each seed from its last
# checkpoint; ROUNDS=N extends it (the published tables: 30).
RUN=${RUN:-/work/wt/farright} OUT=${OUT:-/work/exp-out/farright} CONFIGS=4/4:ab ROUNDS=${ROUNDS:-30} \
  exec bash "$(dirname "$0")/../equal/run.sh"
