"""A busy loop on one CPU at a priority: pins itself to CPU ``argv[1]``, runs
apply_priority(``argv[2]``), prints as JSON what it said and its session's autogroup line, then
spins until killed. Run by tests/test_priority.py in a session of its own, beside another."""

import json
import os
import sys
from pathlib import Path

from swarmnode.node.priority import apply_priority

os.sched_setaffinity(0, {int(sys.argv[1])})
what = apply_priority(sys.argv[2])
print(json.dumps({"what": what, "autogroup": Path("/proc/self/autogroup").read_text().strip()}), flush=True)
while True:
    pass
