"""Strangers with many free keys, from outside, against a real relay and a real training node.

Each test starts the target (``swarmnode relay`` or ``swarmnode start`` on the tiny model)
and two honest private nodes that exchange a bundle every :data:`PERIOD` seconds through the
target only (``tests/strangerlab.py``), then a stranger (``tests/programs/stranger_<transport>.py``:
keys, bundles and announcements made from ``docs/protocol.md`` by its own code) sends valid
records from :data:`KEYS` keys: on hivemind ``call_store`` of 116 KB bundles under each key's
own bundle key, each key first introducing itself as a DHT node of its own; on libp2p a host
per key pushing holds of its bundles and its announcements. They check, measuring each
process of the target with psutil, that its memory stays within a bound that the flood
would have broken before the target's stores were bounded, that the reader has each honest
round, or a newer one (a node fetches only a peer's newest round), within two periods of its
publish during and after it, and that what the target refused is
counted in its ``/metrics``. On hivemind, where the crowd's keys joined as DHT nodes, the
stranger is frozen once done: rounds after it must not rely on anything it claimed.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from nodeproc import free_port
from strangerlab import HonestPair, Memory, Stranger, Target, refusal_counts
from waiting import wait_until

# One flood at a time in a parallel run (pytest-xdist, --dist loadgroup): two crowds and their
# targets at once would take the cores the honest pair's deadlines count on.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("strangers")]

PERIOD = 4.0
# The honest rounds judged after the flood: the first 4 the sender publishes, each once it
# arrived or had its two periods and 2 s; if they are not all judged within 7 periods, every
# round then past that (the assertion needs at least 3).
AFTER_ROUNDS = 4
# A frozen DHT peer costs each lookup that meets it hivemind's call timeout (3 s), once per
# node that still holds it (the timeout drops it): one for the honest sender's store, one
# for its traversal.
FROZEN_PEER_S = 2 * 3.0
# 116 KB bundles: 480 records from 240 keys (hivemind) are 56 MB on the wire, over twice
# what a DHT storage holds; 120 keys pushing 3 holds each (libp2p) are 42 MB, over five times
# what a public node holds for private ones.
FLOODS = {"hivemind": (240, 2, ("--as-nodes",)), "libp2p": (120, 3, ())}
# RSS growth (MB) each target process may show at the end; the flood took them well past it
# before (see docs/reliability.md, "What N keys can still do").
BOUNDS = {("relay", "hivemind"): {"relay": 45, "p2pd": 40},
          ("node", "hivemind"): {"node": 30, "dht": 45, "p2pd": 40},
          ("relay", "libp2p"): {"relay": 45},
          ("node", "libp2p"): {"node": 45}}


# A training target shares its cores with its own training: beside other tests too, its pulls
# came up to 11 s late in a run of the whole suite on 2 cores (docs/reliability.md), so it
# floods with no other test beside it, first waiting for the tests running then to end (the
# longest of the suite run for minutes): its timeout counts that wait.
@pytest.mark.parametrize("kind", ["relay", pytest.param("node", marks=[pytest.mark.alone, pytest.mark.timeout(1800)])])
@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_a_crowd_of_new_keys_leaves_the_target_bounded_and_serving(kind, transport, tmp_path, tiny_model_dir):
    keys, rounds, extra = FLOODS[transport]
    target = Target(kind, transport, tmp_path / kind, tiny_model_dir, stderr=tmp_path / f"{kind}.err",
                    metrics_port=free_port() if kind == "relay" else None)
    pair = stranger = None
    try:
        target.ready()
        pair = HonestPair(transport, target.address, PERIOD, tmp_path)
        pair.start()
        # The flood starts once the honest path through the target works (a busy machine takes
        # longer to get there): rounds during it measure the flood, not the pair's start.
        wait_until(lambda: sum(s is not None for s in pair.latencies().values()) >= 2, 120,
                   "two of the honest sender's bundles to reach the reader")
        memory = Memory(target.processes())
        stranger = Stranger(transport, target.address, keys, rounds, *extra, stderr=tmp_path / "stranger.err")
        stranger.wait("ready", 120)
        t0 = time.time()
        done = stranger.wait("done", 240)
        t1 = after_from = time.time()
        if "--as-nodes" in extra:
            # The crowd joined as DHT nodes near the keys it chose; frozen, it answers nothing
            # more, so rounds after it arrive only if no lookup relies on the ids it claimed.
            os.killpg(stranger.proc.pid, signal.SIGSTOP)
            after_from += FROZEN_PEER_S
        end = after_from + 7 * PERIOD
        after = wait_until(lambda: _judged_after(pair, after_from, end), end - time.time() + 5,
                           "honest rounds after the flood to arrive or run late", interval=0.5)
        memory.close()
        counters = refusal_counts(target.metrics())
        growth = memory.growth()
        during = pair.staleness(t0, t1)
        print(f"\n{kind} over {transport}: {done}; RSS growth MB {growth}; honest rounds during, seconds "
              f"until held {pair.latencies(t0, t1)}, until it or a newer one held {during}; after, until "
              f"it or a newer one held {after}; counters {counters}; the reader's drops of the sender "
              f"{[e['reason'] for e in pair.reader.rejected() if e['author'] == pair.sender.peer_id]}")
        assert done["sent"] >= keys * rounds * 0.9
        for name, bound in BOUNDS[(kind, transport)].items():
            assert growth[name] < bound, (name, growth[name])
        missed = [r for r, s in during.items() if s is None or s > 2 * PERIOD]
        # libp2p: in 26 runs of it in CI (13 runs of the suite, relay and node), a reader went over
        # two periods without that round or a newer one at most once a run (docs/reliability.md)
        assert during and len(missed) <= (1 if transport == "libp2p" else 0), during
        # Frozen, the crowd's peer is still named in the target's answers, so an honest store or
        # lookup may still wait out a 3 s call timeout on it after the allowance: beside a busy
        # core one round of the 2-4 after it was lost in 15 of 22 runs, never two (docs/reliability.md).
        late = [r for r, s in after.items() if s is None or s > 2 * PERIOD]
        assert len(after) >= 3 and len(late) <= (1 if "--as-nodes" in extra else 0), after
        refused = {k: v for k, v in counters.items() if k.startswith("refused_")}
        assert any("newcomers_full" in k for k in refused), counters
    finally:
        for part in (pair, stranger):
            if part is not None:
                part.close() if isinstance(part, HonestPair) else part.kill()
        target.stop()


def _judged_after(pair: HonestPair, since: float, end: float) -> dict[int, float | None] | None:
    """The staleness of the rounds the sender published from ``since`` that can be judged: the
    first :data:`AFTER_ROUNDS` once each arrived or is past its due time; from ``end`` on, every
    round past due; None before."""
    due = 2 * PERIOD + 2
    now = time.time()
    if now >= end:
        return pair.staleness(since, now - due)
    first = dict(list(pair.staleness(since).items())[:AFTER_ROUNDS])
    if len(first) == AFTER_ROUNDS and all(s is not None or now - pair.published[r] >= due for r, s in first.items()):
        return first
    return None
