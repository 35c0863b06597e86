#!/usr/bin/env bash
# The summary of this folder's run beside the mixed run's 8/0 arm (its uniform 4/4 arm, on
# older code, left out; seeds from 3 on ran their own 8/0 arm):
# `bash docs/experiments/mixed/ab/current/report.sh OUT` from the repository's root writes
# OUT/summary.md and OUT/rewards.png.
set -euo pipefail
OUT=$1
HERE=docs/experiments/mixed/ab/current
SEEDS=("$HERE"/seed-*)
bash docs/experiments/combine.sh "$OUT" docs/experiments/mixed "${SEEDS[@]}"
python3 - "$OUT" <<'PY'
import csv, json, sys
out = sys.argv[1]
for name in ("rounds.csv", "external.csv", "yardstick.csv"):
    with open(f"{out}/{name}", newline="") as fh:
        r = csv.DictReader(fh)
        header, rows = r.fieldnames or [], [x for x in r if x["config"] != "4/4"]
    with open(f"{out}/{name}", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header); w.writeheader(); w.writerows(rows)
s = json.load(open(f"{out}/experiment.json"))
s["settings"]["configs"] = "8/0,4/4:ab"
json.dump(s, open(f"{out}/experiment.json", "w"), indent=2)
PY
python -m swarmnode experiment --nodes embedded:3,qwen2.5-coder-0.5b:1 --configs 8/0,4/4:ab --rounds 30 --seeds ${#SEEDS[@]} \
  --tasks docs/experiments/mixed/tasks.toml --no-adaptive-difficulty --questions 8 --completions 4 \
  --max-new-tokens 8 --threads 1 --eval-every 5 --dtype float32 --out "$OUT" --report
