#!/bin/bash
# The mixed swarm's 4/4:ab arm again, on the code of ef45351 (peers' completions trained in their
# verified form, the 3-nat bound on their distance), one process per seed; otherwise the command
# of docs/experiments/mixed/ab. Rerun to resume each seed from its last checkpoint.
# SEEDS="3 4" CONFIGS="8/0,4/4:ab" adds seeds with their own 8/0 arm (the 8/0 arm of seeds 0-2
# is the mixed run's, docs/experiments/mixed). RUN and OUT let a lever's run use it
# (docs/experiments/once/run.sh); FLAGS adds node flags after the others (docs/experiments/near/run.sh).
RUN=${RUN:-/work/wt/exp-run}
OUT=${OUT:-/work/exp-out/mixed-ab2}
for SEED in ${SEEDS:-0 1 2}; do
  mkdir -p "$OUT/seed-$SEED"
  echo "$(date -u +%FT%TZ) start, code $(git -C $RUN rev-parse --short HEAD), rounds 30" >> "$OUT/seed-$SEED/starts.log"
  (cd "$RUN" && PYTHONPATH="$RUN" exec /work/main/.venv/bin/python -m swarmnode experiment \
    --nodes embedded:3,qwen2.5-coder-0.5b:1 --configs "${CONFIGS:-4/4:ab}" \
    --rounds 30 --seeds 1 --first-seed "$SEED" --checkpoint-every 1 \
    --tasks docs/experiments/mixed/tasks.toml --no-adaptive-difficulty \
    --questions 8 --completions 4 --max-new-tokens 8 --threads 1 --eval-every 5 --dtype float32 \
    --out "$OUT/seed-$SEED" --no-progress $FLAGS >> "$OUT/seed-$SEED/run.log" 2>&1) &
done
wait
