"""From ``swarmnode start`` to the first round record: alone, beside a busy core, or several nodes at once.

Each node is a real ``swarmnode start --solo --rounds 1`` in a fresh home (defaults unless
flags follow ``--``), run under ``/usr/bin/time`` for its peak RSS and its CPU time. The
script stamps each stderr line as it arrives: *ready* is the ``threads:`` line (model loaded,
thread count chosen), *first round* the first ``round N:`` line. ``--restart`` starts each
node a second time in the same home once the first start has ended (a restart: resume, the
next round). ``--fresh-cache`` gives the nodes an empty model cache (``SWARMNODE_CACHE``), so
the first start fetches and converts the model and measures every yardstick itself.
``--busy-core`` first starts a pure-Python loop at normal priority (one core kept busy, as by
another program) and stops it at the end. ``--tree PATH`` runs the package found in PATH
(``git archive COMMIT swarmnode``). Usage, from the repository root::

    python benchmarks/first_round.py [--nodes 1] [--restart] [--fresh-cache] [--busy-core] [--tree PATH]
        [--json] [-- START FLAGS]

``cpu_per_wall`` is the node's user CPU seconds over its wall seconds, whole process: about
the thread count a node kept busy, loading included.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

RSS_MARK = "peak-rss-kb:"


def _watch(proc: subprocess.Popen, t0: float, out: dict) -> None:
    for line in proc.stderr:
        now = time.monotonic() - t0
        if " threads: " in line and "ready_s" not in out:
            out["ready_s"] = now
        elif re.search(r" round \d+: ", line) and "first_round_s" not in out:
            out["first_round_s"] = now
            m = re.search(r", ([0-9.]+) s, (\d+) threads", line)
            if m:
                out["round_s"], out["threads"] = float(m.group(1)), int(m.group(2))
        elif line.startswith(RSS_MARK):
            rss_kb, user_s, wall_s = line.split()[1:4]
            out["peak_rss_kb"] = int(rss_kb)
            out["cpu_per_wall"] = round(float(user_s) / max(float(wall_s), 1e-9), 2)
        elif " yardstick " in line:
            out.setdefault("yardstick_lines", []).append(line.strip()[9:])
        out.setdefault("lines", []).append(line.rstrip("\n"))


def _start_all(homes: list[str], env: dict, cwd: str | None, start_flags: list[str], timeout: float) -> list[dict]:
    """One ``swarmnode start --rounds 1`` in each home, all at once; each one's figures once they end."""
    procs, outs, watchers = [], [], []
    t0 = time.monotonic()
    for home in homes:
        argv = ["/usr/bin/time", "-f", f"{RSS_MARK} %M %U %e", sys.executable, "-m", "swarmnode", "start", "--solo",
                "--rounds", "1", "--home", home, *start_flags]
        # a process group of its own: a stop signals the node too, not only /usr/bin/time (the same
        # session, so the node stays in the benchmark's scheduling group: Linux autogroups are per session)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                                process_group=0)
        out: dict = {"home": home}
        watcher = threading.Thread(target=_watch, args=(proc, t0, out), daemon=True)
        watcher.start()
        procs.append(proc)
        outs.append(out)
        watchers.append(watcher)
    deadline = t0 + timeout
    for proc in procs:
        try:
            proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # cut at the timeout: no round record, no figure
            proc.wait()
    for watcher in watchers:
        watcher.join(10)
    for out in outs:
        if "ready_s" in out and "first_round_s" in out:
            out["after_ready_s"] = out["first_round_s"] - out["ready_s"]
    return outs


def run(nodes: int, busy_core: bool, tree: str | None, start_flags: list[str], timeout: float,
        restart: bool = False, fresh_cache: bool = False) -> list[dict]:
    """The figures of each start: the ``nodes`` first starts, then (``restart``) their restarts."""
    env, cwd = dict(os.environ), None
    if tree:  # `python -m` puts the working directory first on sys.path: run from the tree
        cwd = str(Path(tree).resolve())
        env["PYTHONPATH"] = cwd
    if fresh_cache:
        env["SWARMNODE_CACHE"] = tempfile.mkdtemp(prefix="swarmnode-cache-")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy_core else None
    try:
        if spinner:
            time.sleep(2.0)  # the spinner is running before the node measures the machine
        homes = [tempfile.mkdtemp(prefix="swarmnode-first-") for _ in range(nodes)]
        outs = [{"start": "first", **o} for o in _start_all(homes, env, cwd, start_flags, timeout)]
        if restart:
            outs += [{"start": "restart", **o} for o in _start_all(homes, env, cwd, start_flags, timeout)]
        return outs
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()


def _fmt(out: dict, key: str) -> str:
    return f"{out[key]:.1f}" if key in out else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--busy-core", action="store_true")
    ap.add_argument("--restart", action="store_true", help="start each node again in its home")
    ap.add_argument("--fresh-cache", action="store_true", help="an empty model cache: fetch, convert, measure")
    ap.add_argument("--tree", default=None)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds before the nodes are stopped")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--lines", action="store_true", help="print every node's stderr")
    ap.add_argument("start_flags", nargs=argparse.REMAINDER, help="-- flags for swarmnode start")
    args = ap.parse_args()
    outs = run(args.nodes, args.busy_core, args.tree, [a for a in args.start_flags if a != "--"], args.timeout,
               restart=args.restart, fresh_cache=args.fresh_cache)
    if args.json:
        print(json.dumps([{k: v for k, v in o.items() if k != "lines"} for o in outs]))
        return
    for i, o in enumerate(outs):
        if args.lines:
            print("\n".join(o.get("lines", [])))
        print(f"node {i % args.nodes}, {o['start']} start: ready {_fmt(o, 'ready_s')} s, "
              f"first round record {_fmt(o, 'first_round_s')} s "
              f"({_fmt(o, 'after_ready_s')} s after ready; the round itself {_fmt(o, 'round_s')} s on "
              f"{o.get('threads', 'n/a')} threads), peak RSS {o.get('peak_rss_kb', 'n/a')} KB, "
              f"user CPU / wall {o.get('cpu_per_wall', 'n/a')}")
        for line in o.get("yardstick_lines", []):
            print(f"        {line}")


if __name__ == "__main__":
    main()
