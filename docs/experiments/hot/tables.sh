#!/usr/bin/env bash
# This folder's tables from the run's (run.sh's OUT; /work/exp-out/hot by default), from the
# repository's root: each branch's seeds joined by docs/experiments/combine.sh, then only the rows of
# rounds 100 on kept (rounds 0-99 are the equal run's, in docs/experiments/equal/).
set -euo pipefail
RUN=${1:-/work/exp-out/hot}
HERE=docs/experiments/hot
for BRANCH in base hot; do
  bash docs/experiments/combine.sh "$HERE/$BRANCH" "$RUN/$BRANCH"/seed-{0,1,2}
  python3 - "$HERE/$BRANCH" <<'PY'
import csv, glob, sys
for path in glob.glob(f"{sys.argv[1]}/*.csv"):
    with open(path, newline="") as fh:
        r = csv.DictReader(fh)
        header, rows = r.fieldnames or [], [x for x in r if x["config"] != "base" and int(x["round"]) >= 100]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header); w.writeheader(); w.writerows(rows)
PY
done
