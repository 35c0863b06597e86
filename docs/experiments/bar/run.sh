#!/bin/bash
# The equal-nodes experiment's 4/4:ab arm with peers' completions held to the lowest bar the
# receiver's own completions have had (lowest-bar.patch on ef45351's training path: commit
# af9333a of these runs), one process per seed; otherwise docs/experiments/equal/run.sh, whose
# 8/0 arm is its baseline (a node that draws no peer's group runs the same on either bar).
# RUN: a worktree of main with the patch applied (git worktree add RUN && git -C RUN apply
# docs/experiments/bar/lowest-bar.patch). Rerun to resume each seed from its last checkpoint.
RUN=/work/wt/lever
OUT=/work/exp-out/lever
for SEED in 0 1 2; do
  mkdir -p "$OUT/seed-$SEED"
  echo "$(date -u +%FT%TZ) start, code $(git -C $RUN rev-parse --short HEAD), rounds ${ROUNDS:-100}" >> "$OUT/seed-$SEED/starts.log"
  (cd "$RUN" && PYTHONPATH="$RUN" exec nice -n 10 /work/main/.venv/bin/python -m swarmnode experiment \
    --nodes 4 --model smollm2-135m --configs 4/4:ab \
    --rounds "${ROUNDS:-100}" --seeds 1 --first-seed "$SEED" --checkpoint-every 1 \
    --tasks "$RUN/docs/experiments/equal/tasks.toml" --no-adaptive-difficulty \
    --questions 8 --completions 4 --max-new-tokens 8 --learning-rate 2e-4 \
    --device cpu --dtype float32 --threads 1 --eval-every 10 \
    --out "$OUT/seed-$SEED" --no-progress >> "$OUT/seed-$SEED/run.log" 2>&1) &
done
wait
