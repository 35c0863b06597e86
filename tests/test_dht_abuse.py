"""Attacks on the hivemind transport from outside: a stock hivemind DHT (tests/dht_attacker.py,
its own process, its own keys) against real honest nodes (tests/transport_node.py).

* Storage: 6,000 rounds records of ~143 KB expiring four years ahead, then 1,200 more
  expiring within the TTL, all valid bundles signed by the attacker's 60 keys. The honest
  node's DHT process must grow by less than 50 MB, and count what it refused.
* Junk announcements: announcements validly signed by fresh keys, naming rounds nobody stored.
  The honest nodes' exchange rate must stay at least 0.8x the quiet rate;
  :data:`JUNK_ANNOUNCEMENTS` says how many this test writes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from eventproc import EventProcess
from transport_node import SWARM, ProcNode, descendants, process_name
from waiting import wait_until

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
# Writing them takes the attacker about 20 s on a 2-core machine.
JUNK_ANNOUNCEMENTS = 20_000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def settled_rss_mb(pid: int, timeout: float) -> float:
    """Process ``pid``'s RSS once two readings a second apart differ by less than 1 MB."""
    readings = [rss_mb(pid)]

    def settled() -> float | None:
        readings.append(rss_mb(pid))
        return readings[-1] if abs(readings[-1] - readings[-2]) < 1.0 else None
    return wait_until(settled, timeout, f"the RSS of process {pid} to settle", interval=1.0)


def dht_process(node: ProcNode) -> int:
    """The node's forked hivemind DHT process (the python child; p2pd is the other)."""
    found = [pid for pid in descendants(node.proc.pid) if process_name(pid).startswith("python")]
    assert len(found) == 1, [(p, process_name(p)) for p in descendants(node.proc.pid)]
    return found[0]


class Attacker(EventProcess):
    def __init__(self, peer: str, mode: str, count: int, stderr: Path):
        super().__init__([sys.executable, str(HERE / "dht_attacker.py"), "--peer", peer, "--swarm", SWARM,
                          "--mode", mode, "--count", str(count)], stderr)


@pytest.fixture
def nodes(tmp_path):
    started: list = []

    def start(kind, *args, **kw):
        node = kind(*args, **kw)
        started.append(node)
        return node

    yield start
    for node in reversed(started):
        node.kill()


def test_a_storage_flood_leaves_the_honest_dht_within_50_mb(nodes, tmp_path):
    honest = nodes(ProcNode, "hivemind", 0, stderr_path=tmp_path / "honest.err").ready()
    pid = dht_process(honest)
    before = settled_rss_mb(pid, 60)
    attacker = nodes(Attacker, honest.addresses[0], "rounds", 6000, tmp_path / "attacker.err")
    attacker.wait("ready", 60)
    done = attacker.wait("done", 900)
    growth = settled_rss_mb(pid, 60) - before
    # The transport reads its DHT process's counters every tenth poll: wait for a reading that
    # has the second wave in it.
    def budget_met(c: dict) -> bool:
        return bool(c["evicted"] or c["refused"].get("storage_full") or c["refused"].get("signer_full"))

    counters = wait_until(lambda: (c := honest.counters()) and c["refused"].get("far_expiry") and budget_met(c)
                          and c, 60, "counters that show the byte budget")
    print(f"\nstorage flood: {done['seconds']:.0f} s, honest DHT RSS {before:.0f} MB -> +{growth:.1f} MB, {counters}")
    assert growth < 50
    assert counters["refused"]["far_expiry"] >= 6000 * 0.9  # the attacker's own node takes some
    assert counters["stored_bytes"]["stored"] <= 24 * 1024 * 1024
    assert budget_met(counters)  # the in-TTL wave met the byte budget


def exchange_rate(a: ProcNode, b: ProcNode, first_round: int, seconds: float) -> float:
    """Bundles a second both nodes received while each published one a second."""
    got = len(a.messages()) + len(b.messages())
    tick = time.monotonic()
    end = tick + seconds
    r = first_round
    slowest = 0.0
    while time.monotonic() < end:
        slowest = max(slowest, a.publish(r, 3000)["publish_s"], b.publish(r, 3000)["publish_s"])
        r += 1
        tick += 1.0
        time.sleep(max(0.0, tick - time.monotonic()))
    # What is still in flight counts if it lands within 3 s of the last publish (a duration: part
    # of what the rate measures); once every bundle has landed there is nothing more to wait for.
    grace_end = time.monotonic() + 3.0
    rounds = range(first_round, r)
    wait_until(lambda: (_landed(a, b.peer_id, rounds) + _landed(b, a.peer_id, rounds) >= 2 * len(rounds)
                        or time.monotonic() >= grace_end), 10, "the last bundles in flight")
    rate = (len(a.messages()) + len(b.messages()) - got) / seconds
    print(f"\n{r - first_round} rounds published in {seconds} s (slowest publish {slowest:.1f} s), "
          f"{rate:.2f} bundles/s received")
    return rate


def _landed(node: ProcNode, sender: str, rounds: range) -> int:
    return len({m["round"] for m in node.messages() if m["sender"] == sender and m["round"] in rounds})


def test_junk_announcements_do_not_choke_the_exchange(nodes, tmp_path):
    a = nodes(ProcNode, "hivemind", 0, stderr_path=tmp_path / "a.err").ready()
    b = nodes(ProcNode, "hivemind", 1, bootstrap=a.addresses[:1], stderr_path=tmp_path / "b.err").ready()
    wait_until(lambda: a.peer_id in b.peers() and b.peer_id in a.peers(), 60, "the honest nodes to join")
    quiet = exchange_rate(a, b, 0, 20)
    attacker = nodes(Attacker, a.addresses[0], "announcements", JUNK_ANNOUNCEMENTS, tmp_path / "attacker.err")
    attacker.wait("ready", 60)
    done = attacker.wait("done", 300)
    under_attack = exchange_rate(a, b, 100, 40)
    print(f"\njunk announcements: {done['stored']} stores in {done['seconds']:.0f} s; exchange {quiet:.2f}/s quiet, "
          f"{under_attack:.2f}/s under attack; refusals {a.refusals()}")
    assert quiet > 1.0
    assert under_attack >= 0.8 * quiet
