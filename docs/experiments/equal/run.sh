#!/bin/bash
# The equal-nodes experiment on the code of ef45351 (main as users run it), one process per seed.
# Rerun to resume each seed from its last checkpoint. ROUNDS=N extends it and SEEDS="3 4" adds seeds;
# nothing else may change.
# RUN, OUT and CONFIGS let another run of these flags use it (docs/experiments/bar/run.sh); FLAGS adds
# flags after them (docs/experiments/hot/run.sh).
RUN=${RUN:-/work/wt/exp-run}
OUT=${OUT:-/work/exp-out/equal}
for SEED in ${SEEDS:-0 1 2}; do
  mkdir -p "$OUT/seed-$SEED"
  echo "$(date -u +%FT%TZ) start, code $(git -C $RUN rev-parse --short HEAD), rounds ${ROUNDS:-100}" >> "$OUT/seed-$SEED/starts.log"
  (cd "$RUN" && PYTHONPATH="$RUN" exec nice -n 10 /work/main/.venv/bin/python -m swarmnode experiment \
    --nodes 4 --model smollm2-135m --configs "${CONFIGS:-8/0,4/4:ab}" \
    --rounds "${ROUNDS:-100}" --seeds 1 --first-seed "$SEED" --checkpoint-every 1 \
    --tasks "$RUN/docs/experiments/equal/tasks.toml" --no-adaptive-difficulty \
    --questions 8 --completions 4 --max-new-tokens 8 --learning-rate 2e-4 \
    --device cpu --dtype float32 --threads 1 --eval-every 10 \
    --out "$OUT/seed-$SEED" --no-progress $FLAGS >> "$OUT/seed-$SEED/run.log" 2>&1) &
done
wait
