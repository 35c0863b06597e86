#!/bin/bash
# Moving levels and the draw passing over far peers together: the 4/4:ab arm of the mixed
# swarm with --adaptive-difficulty --skip-far-peer-rounds 4 (../../skip/ tried the second with
# levels pinned), on a checkout of main (git worktree add --detach RUN COMMIT). Its baseline
# is ../run.sh's, whose 8/0 arm it shares (no peers, nothing passed over). Seeds SEEDS
# (default 0 1 2; the README's five: SEEDS="0 1 2 3 4"). Rerun to resume each seed from its
# last checkpoint.
RUN=${RUN:-/work/wt/adaptive}
HERE=$(dirname "$0")
RUN=$RUN OUT=/work/exp-out/adaptive-skip CONFIGS=4/4:ab SEEDS=${SEEDS:-0 1 2} \
  FLAGS="--adaptive-difficulty --skip-far-peer-rounds 4" bash "$HERE/../../mixed/ab/current/run.sh"
