#!/bin/bash
# The equal-nodes experiment (docs/experiments/equal/README.md). Rerun to resume from the last
# checkpoint (exact). ROUNDS=N extends it; EVAL=N changes the yardstick's cadence; nothing else
# may change. Runs the frozen code of the worktree /work/wt/exp-run.
RUN=/work/wt/exp-run
OUT=/work/exp-out/equal
mkdir -p "$OUT"
echo "$(date -u +%FT%TZ) start, code $(git -C $RUN rev-parse --short HEAD), rounds ${ROUNDS:-100}" >> "$OUT/starts.log"
cd "$RUN" && PYTHONPATH="$RUN" exec nice -n 19 /work/main/.venv/bin/python -m swarmnode experiment \
  --nodes 4 --model smollm2-135m --configs 8/0,4/4:ab \
  --rounds "${ROUNDS:-100}" --seeds 3 --checkpoint-every 1 \
  --tasks "$RUN/docs/experiments/equal/tasks.toml" --no-adaptive-difficulty \
  --questions 8 --completions 4 --max-new-tokens 8 --learning-rate 2e-4 \
  --device cpu --dtype float32 --threads 1 --eval-every "${EVAL:-10}" \
  --out "$OUT" --no-progress
