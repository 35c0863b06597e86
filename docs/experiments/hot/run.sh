#!/bin/bash
# The equal run's seeds 0-2 carried on from their round-100 checkpoints, both arms, at sampling
# temperature 1.3 (hot/) and, as its baseline, at the node's 1.0 (base/): the code of ef45351 and
# docs/experiments/equal/run.sh's flags, nothing else changed. The first start copies each seed's
# tables, settings and last checkpoints from EQUAL, and writes the branch's temperature into its
# experiment.json (the one setting that differs from the run it was cut from). Rerun to resume;
# ROUNDS=N (default 120) extends both.
EQUAL=${EQUAL:-/work/exp-out/equal}
OUT=${OUT:-/work/exp-out/hot}
HERE=$(dirname "$0")
for BRANCH in base hot; do
  TEMPERATURE=$([ $BRANCH = hot ] && echo 1.3 || echo 1.0)
  for SEED in 0 1 2; do
    DEST="$OUT/$BRANCH/seed-$SEED"
    [ -d "$DEST" ] && continue
    mkdir -p "$DEST"
    cp "$EQUAL/seed-$SEED"/{*.csv,starts.log,experiment.json} "$DEST/"
    (cd "$EQUAL/seed-$SEED" && cp -a --parents nodes/*/*/*/checkpoints/round-000099 "$DEST/")
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
d["settings"]["node.temperature"] = float(sys.argv[2])
open(sys.argv[1], "w").write(json.dumps(d, indent=2, sort_keys=True) + "\n")' "$DEST/experiment.json" "$TEMPERATURE"
  done
done
OUT="$OUT/base" SEEDS="0 1 2" ROUNDS=${ROUNDS:-120} bash "$HERE/../equal/run.sh" &
OUT="$OUT/hot" SEEDS="0 1 2" ROUNDS=${ROUNDS:-120} FLAGS="--temperature 1.3" bash "$HERE/../equal/run.sh" &
wait
