"""apply_priority("background") with a thread already running: prints as JSON what it said, the
nice value of every thread of this process, and the nice value of a thread started after it.
Run by tests/test_priority.py in a child: a niced test process could not be un-niced.
"""

import json
import os
import threading

from swarmnode.node.priority import apply_priority

started, done = threading.Event(), threading.Event()
early = threading.Thread(target=lambda: (started.set(), done.wait()))
early.start()
started.wait()
what = apply_priority("background")
later_nice = []
later = threading.Thread(target=lambda: later_nice.append(os.getpriority(os.PRIO_PROCESS, 0)))
later.start()
later.join()
tasks = {}
try:
    for task in os.listdir("/proc/self/task"):
        try:
            tasks[int(task)] = os.getpriority(os.PRIO_PROCESS, int(task))
        except ProcessLookupError:  # the later thread's entry can outlive its join for a moment
            pass
finally:  # else a failure above leaves `early` waiting and this process never exits
    done.set()
    early.join()
print(json.dumps({"what": what, "tasks": list(tasks.values()), "later": later_nice[0]}))
