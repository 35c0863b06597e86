"""Spends half a second of CPU, prints "done", then waits for its stdin to close: a child whose
CPU time tests/test_swarm_scale.py counts while it lives and after it is reaped.
"""

import sys
import time

start = time.process_time()
while time.process_time() - start < 0.5:
    pass
print("done", flush=True)
sys.stdin.read()
