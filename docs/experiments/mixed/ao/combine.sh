#!/usr/bin/env bash
# The above-own arm beside docs/experiments/mixed's 8/0 and 4/4 arms, cut to the rounds it
# finished, in one directory that `swarmnode experiment --report` reads (with the run's flags
# and --configs 8/0,4/4,4/4:ao). Usage: combine.sh PUBLISHED_DIR AO_RUN_DIR OUT_DIR
set -euo pipefail
PUB=$1; RUN=$2; OUT=$3
rm -rf "$OUT"; mkdir -p "$OUT"
python3 - "$PUB" "$RUN" "$OUT" <<'PY'
import csv, json, sys
pub, run, out = sys.argv[1:]
# The published arms cut to the rounds the new arm finished in each seed.
done = {}
with open(f"{run}/rounds.csv", newline="") as fh:
    for x in csv.DictReader(fh):
        done[x["seed"]] = max(done.get(x["seed"], 0), int(x["round"]) + 1)
def keep(src, name, x):
    if x["config"] == "base":
        return src == pub
    if src == run:
        return True
    n = done.get(x["seed"], 0)
    return int(x["round"]) <= n if name == "yardstick.csv" else int(x["round"]) < n
for name in ("rounds.csv", "external.csv", "yardstick.csv"):
    rows, header = [], None
    for src in (pub, run):
        with open(f"{src}/{name}", newline="") as fh:
            r = csv.DictReader(fh); header = header or r.fieldnames
            rows += [x for x in r if keep(src, name, x)]
    with open(f"{out}/{name}", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header); w.writeheader(); w.writerows(rows)
s = json.load(open(f"{run}/experiment.json"))
s["settings"]["configs"] = "8/0,4/4,4/4:ao"
json.dump(s, open(f"{out}/experiment.json", "w"), indent=2)
PY
