#!/bin/bash
# One seed of the bound's cost (README.md): bound on (gap 3) then off (gap 1000), each in an
# output folder of its own so that seeds run as parallel processes. Usage: run-seed.sh SEED
RUN=/work/wt/defence-run
OUT=/work/exp-out/defence
seed=$1
ROUNDS=${ROUNDS:-8}
echo "$(date -u +%FT%TZ) start seed $seed, code $(git -C $RUN rev-parse --short HEAD), rounds $ROUNDS" >> "$OUT/starts.log"
for gap in 3 1000; do
  (cd "$RUN" && PYTHONPATH="$RUN" nice -n 5 /work/main/.venv/bin/python -m swarmnode experiment \
    --nodes 4 --model smollm2-135m --configs 4/4:ab \
    --rounds "$ROUNDS" --first-seed "$seed" --seeds 1 --checkpoint-every 1 \
    --tasks "$RUN/docs/experiments/equal/tasks.toml" --no-adaptive-difficulty \
    --questions 8 --completions 4 --max-new-tokens 8 --learning-rate 2e-4 \
    --device cpu --dtype float32 --threads 1 --eval-every 4 \
    --peer-logprob-gap $gap --out "$OUT/gap-$gap-s$seed" --no-progress) || exit 1
done
echo "$(date -u +%FT%TZ) done seed $seed" >> "$OUT/starts.log"
