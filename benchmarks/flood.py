"""Round time of a libp2p node with and without a peer flooding it.

Runs ``swarmnode start --transport libp2p`` bootstrapped to ``tests/flooder.py`` twice: once
with the flooder connected but quiet, once with it publishing as fast as it can (valid,
hostile and garbage bundles mixed) from the node's first round on. Reports the median round
time of each run, their ratio (target <= 1.5), what the flooder sent and what the node's peer
table counted. Usage, from the repository root::

    PYTHONPATH=. python benchmarks/flood.py [--model DIR] [--rounds 10] [--questions 4] [--completions 4]
        [--max-new-tokens 16] [--threads 1]

Without ``--model`` it builds the tiny random model of the tests (rounds of well under a
second, where the flood's share of the CPU shows the most).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def _wait(predicate, timeout: float, what: str, procs: list[subprocess.Popen]):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if any(p.poll() is not None for p in procs):
            raise SystemExit(f"{what}: a process exited early")
        time.sleep(0.2)
    raise SystemExit(f"{what}: timed out after {timeout:.0f} s")


def run(args: argparse.Namespace, model: str, flood: bool, work: Path) -> dict:
    from flooder import FLOODER_SEED, SWARM
    from nodeproc import metric_rows, stop_all
    from swarmnode.swarm.identity import Identity

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    home, go = work / "node", work / "go"
    flog = (work / "flooder.log").open("w")
    flooder = subprocess.Popen([sys.executable, str(ROOT / "tests" / "flooder.py"), "--seconds", "3600",
                                "--start-file", str(go)], stdout=flog, stderr=subprocess.STDOUT, env=env)
    node = None
    try:
        def ready():
            for line in (work / "flooder.log").read_text().splitlines():
                if line.startswith('{"event": "ready"'):
                    return json.loads(line)["addresses"][0]
        address = _wait(ready, 60, "flooder start", [flooder])
        node = subprocess.Popen([sys.executable, "-m", "swarmnode", "start", "--home", str(home), "--model", model,
                                 "--transport", "libp2p", "--swarm", SWARM, "--bootstrap", address, "--listen",
                                 "/ip4/127.0.0.1/tcp/0", "--questions", str(args.questions), "--completions",
                                 str(args.completions), "--max-new-tokens", str(args.max_new_tokens), "--device",
                                 "cpu", "--threads", str(args.threads), "--rounds", str(args.rounds + 1),
                                 "--api-port", "0"], stdout=(work / "node.log").open("w"), stderr=subprocess.STDOUT,
                                env=env)
        _wait(lambda: (home / "api.json").exists(), 300, "node API", [node, flooder])
        if flood:
            go.touch()
            _wait(lambda: "flooding" in (work / "flooder.log").read_text(), 120, "flood start", [flooder])
        api = json.loads((home / "api.json").read_text())
        peers: list[dict] = []
        while node.poll() is None:
            try:
                with urllib.request.urlopen(api["url"] + "/v1/peers", timeout=5) as resp:
                    peers = json.loads(resp.read())["peers"]
            except OSError:
                pass
            time.sleep(1.0)
        if node.returncode != 0:
            raise SystemExit(f"the node exited with {node.returncode}; see {work / 'node.log'}")
    finally:
        stop_all(node, flooder)
    rows = metric_rows(home)
    seconds = [r["seconds"] for r in rows[1:]]  # round 0 warms up (first scoring, allocator)
    flooder_id = Identity.from_seed(FLOODER_SEED).peer_id
    row = next((p for p in peers if p["peer_id"] == flooder_id), {})
    return {"rounds": len(rows), "median_round_s": statistics.median(seconds),
            "mean_round_s": statistics.fmean(seconds),
            "flooder": {k: row.get(k) for k in ("accepted", "rejected", "rejected_by_reason", "banned_until",
                                                 "pooled")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="model directory or id; default: the tests' tiny random model")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--completions", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="swarmnode-flood-") as tmp:
        model = args.model
        if model is None:
            from tinymodel import build_tiny_model

            model = str(build_tiny_model(Path(tmp) / "model"))
        results = {}
        for name, flood in (("quiet", False), ("flooded", True)):
            work = Path(tmp) / name
            work.mkdir()
            results[name] = run(args, model, flood, work)
            print(name, json.dumps(results[name]), flush=True)
    ratio = results["flooded"]["median_round_s"] / results["quiet"]["median_round_s"]
    print(json.dumps({"ratio_median_round_time": round(ratio, 2), "target": 1.5, "cpus": os.cpu_count(),
                      "load_avg_1m": round(os.getloadavg()[0], 1)}))


if __name__ == "__main__":
    main()
