"""The DHT model's kept answers (``Space``'s windows, regions and expiry heap) stay those of a
fresh computation while servers come and go and announcements expire."""

from __future__ import annotations

import bisect
import heapq
import random

from swarmsim.dht import REGION_BITS, STALE_S, Space

_LOW = (1 << 64) - 1


def _nearest(ring: list[tuple[int, int]], key: int, k: int, skip: set[int]) -> list[int]:
    """Space.nearest's rule, computed afresh: the window around ``key``, sorted."""
    width = 4 * k + len(skip) + 8
    pos = bisect.bisect_left(ring, (key, -1))
    window = sorted((i ^ key, h) for i, h in ring[max(0, pos - width):pos + width] if h not in skip)
    return [h for _, h in window[:k]]


def _held(space: Space, ring: list[tuple[int, int]], src: int, key: int, k: int, skip: set[int]) -> list[int]:
    """Space.held's rule, computed afresh (heapq.nsmallest over the region by salted low bits)."""
    shift = 160 - REGION_BITS
    if key >> shift == space.ids[src] >> shift:
        return _nearest(ring, key, k, skip)
    region = [(i, h) for i, h in ring if i >> shift == key >> shift and h not in skip]
    if len(region) <= k:
        return _nearest(ring, key, k, skip)
    salt = space._salts[src] & _LOW
    held = heapq.nsmallest(k, region, key=lambda entry: (entry[0] & _LOW) ^ salt)
    return [h for _, h in sorted(held, key=lambda entry: entry[0] ^ key)]


def test_nearest_and_held_answer_as_a_fresh_computation_while_servers_come_and_go():
    hosts = 3000
    space, rng = Space(hosts, random.Random(11)), random.Random(12)
    now = 0.0
    for host in range(0, hosts, 2):
        space.server_up(host, now)
    keys = [rng.getrandbits(160) for _ in range(8)]  # asked again and again, as shard keys are
    for step in range(400):
        now += rng.uniform(0.0, STALE_S / 40)  # servers gone long enough are forgotten on the way
        host = rng.randrange(hosts)
        if host in space.up:
            space.server_down(host, now)
        else:
            space.server_up(host, now)
        ring = sorted((space.ids[h], h) for h in space.up | space.gone.keys())
        skip = set(rng.sample(range(hosts), rng.choice([0, 1, 5, 40])))
        for key in (rng.choice(keys), rng.getrandbits(160)):
            for k in (5, 20):
                assert space.nearest(key, k, skip) == _nearest(ring, key, k, skip)
                src = rng.randrange(hosts)
                assert space.held(src, key, k, skip) == _held(space, ring, src, key, k, skip)


def test_a_shard_drops_what_expired_and_keeps_the_order_of_the_rest():
    space, rng = Space(1, random.Random(3)), random.Random(4)
    kid, stored = 7, {}
    for t in range(2000):  # 40 peers storing rounds that live 120 s, some stored late
        peer, expires = f"p{rng.randrange(40)}", t + rng.uniform(60.0, 120.0)
        space.put_announcement(0, kid, peer, t, expires)
        stored[peer] = (t, expires)
        if t % 7 == 0:
            now = t + rng.uniform(0.0, 30.0)
            record = space.holds(0, kid, now)
            assert record is not None
            # What expired is gone for good, however the clock moves after; a peer stored again
            # keeps its place, one gone and stored again comes last.
            stored = {p: v for p, v in stored.items() if v[1] >= now}
            assert list(space.shard_entries(record, now).items()) == list(stored.items())
