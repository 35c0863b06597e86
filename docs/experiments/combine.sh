#!/usr/bin/env bash
# Arms or seeds of an experiment run apart (each arm in its own --out, or one seed per --out)
# put in one directory that `swarmnode experiment --report` reads (with the runs' flags and
# --configs naming every arm). Every table a run wrote is joined (rounds.csv, external.csv,
# yardstick.csv, and groups.csv where every run has it); every arm is cut, seed by seed, to
# the rounds all of them finished in that seed; the untrained model's rows come from the first
# directory. A column only some runs have (a later code's) is left empty in the others' rows.
# Usage: combine.sh OUT_DIR RUN_DIR [RUN_DIR ...]
set -euo pipefail
OUT=$1; shift
rm -rf "$OUT"; mkdir -p "$OUT"
python3 - "$OUT" "$@" <<'PY'
import csv, json, os, sys
out, runs = sys.argv[1], sys.argv[2:]
tables = {}
names = ["rounds.csv", "external.csv", "yardstick.csv"]
names += ["groups.csv"] if all(os.path.exists(f"{run}/groups.csv") for run in runs) else []
for name in names:
    header, rows = {}, []
    for i, run in enumerate(runs):
        with open(f"{run}/{name}", newline="") as fh:
            r = csv.DictReader(fh)
            header.update(dict.fromkeys(r.fieldnames or ()))
            rows += [x for x in r if x["config"] != "base" or i == 0]
    tables[name] = header, rows
finished = {}  # (config, seed) -> rounds finished
for x in tables["rounds.csv"][1]:
    key = (x["config"], x["seed"])
    finished[key] = max(finished.get(key, 0), int(x["round"]) + 1)
done = {}  # seed -> rounds every arm finished
for (config, seed), n in finished.items():
    done[seed] = min(done.get(seed, n), n)
configs = list(dict.fromkeys(c for c, _ in finished))
for name, (header, rows) in tables.items():
    last = (lambda r, n: r <= n) if name == "yardstick.csv" else (lambda r, n: r < n)
    kept = [x for x in rows if x["config"] == "base" or last(int(x["round"]), done.get(x["seed"], 0))]
    with open(f"{out}/{name}", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(header), restval=""); w.writeheader(); w.writerows(kept)
s = json.load(open(f"{runs[-1]}/experiment.json"))
s["settings"]["configs"] = ",".join(configs)
json.dump(s, open(f"{out}/experiment.json", "w"), indent=2)
print(f"{out}: configs {','.join(configs)}; rounds per seed {dict(sorted(done.items()))}")
PY
