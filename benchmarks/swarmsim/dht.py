"""A model of hivemind 1.1.12's DHT: who holds a key, and what a lookup costs whom.

Read from hivemind's ``dht/node.py``, ``protocol.py`` and ``traverse.py`` (the defaults
swarmnode keeps: ``bucket_size`` 20, ``num_replicas`` 5, ``num_workers`` 4, ``chunk_size``
16, ``wait_timeout`` 3 s, no caching):

* **Servers and clients.** Public nodes are DHT servers: they hold records and answer
  lookups. Nodes behind NAT are clients: they store at and read from servers, and no routing
  table lists them.
* **A store** (``store_many``) first looks for the key's nearest servers with a beam of
  ``bucket_size`` (the lookup below, which never stops early), then stores the record at the
  ``num_replicas`` nearest that answer (the storer itself if it is a server among them).
  An announcement may skip the lookup and go straight to the replicas a node remembers
  (``call_store``, one request each; :mod:`~swarmsim.hivemind_node`).
* **A get** (``get_many_by_id``) looks the key up: it visits servers nearest first, ``num_workers``
  requests in flight shared by the keys of one call, each request carrying up to
  ``sqrt(keys)`` keys (``queries_per_call``); every visited server answers, for each key,
  with its record if it holds one and ``bucket_size`` nearest peers it knows. With
  ``sufficient_expiration_time`` = infinity (what swarmnode asks for) the search only ends
  once the ``bucket_size`` nearest servers have all been visited, so every replica sends its
  copy; with a finite one, it ends at the first copy found, and only the requests in flight
  then still answer.
* **Routing.** A traversal starts from the ``bucket_size`` servers nearest the key that the
  node's routing table holds (``get_many_by_id``: ``routing_table.get_nearest_neighbors``)
  and visits the nearest it has not visited first. hivemind's table (``depth_modulo`` 5)
  splits a full bucket only if it covers the node's own id or its depth is not a multiple of
  5: of the 1/32 of the id space that shares a key's first 5 bits (its *region*), a node
  outside the region holds ``bucket_size`` servers (the first it met, :meth:`Space.held`),
  and a node inside it every server of it (its buckets there go 5 bits deeper, 20 servers
  each, up to about 20,000 servers in all). So while a region holds at most ``bucket_size``
  servers (up to about 640 servers in all), a node's table holds the key's nearest; past
  that, the first servers a traversal asks are the nearest of the ``bucket_size`` it holds,
  which are in the key's region: the nearest among them is one of the key's replicas (its
  ``num_replicas`` nearest servers) if the table holds any, and each of them answers with
  the key's nearest servers, so the next requests go to the beam (:func:`plan_lookup`). A
  lookup visits one wave of requests more than with a table holding every server at most,
  where a model of a path of random servers across the id space made it four (a 4-key read
  asks one server a wave for each key). A server that went away stays in the others' routing tables until a request to
  it times out (``wait_timeout``, 3 s); each node finds that out once, and forgets it when the
  server comes back (its join lookup and requests put it in the tables of the servers it
  asks, whose answers list it again). One gone :data:`STALE_S` has left every table that
  mattered (:meth:`Space.forget_stale`, run at each server's coming and going).

Distances are XOR distances between 160-bit ids, as in hivemind; a key's id is the SHA-1 of
the key, a node's a random draw (hivemind derives both with SHA-1 too).
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import random
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

BUCKET_SIZE = 20
NUM_REPLICAS = 5
NUM_WORKERS = 4
CHUNK_SIZE = 16
WAIT_TIMEOUT = 3.0
REGION_BITS = 5  # hivemind's depth_modulo: a table's buckets away from its own id cover 1/32 of the ids each
STALE_S = 600.0  # a server gone this long has left every routing table that mattered
_ID_BITS = 160
_LOW_BITS = 64  # of an id, those that rank a region's servers for a node's table (:meth:`Space.held`)
_LOW = (1 << _LOW_BITS) - 1
# Windows :meth:`Space.nearest` keeps (one a key): a key's readers and fetchers ask for the
# same key again and again while the servers stay as they are. Past this many the oldest goes:
# 10,000 nodes publish ~80 bundles a second, fetched up to a round after (tens of seconds).
_WINDOWS_KEPT = 8192
_WINDOW_SLACK = 16  # a window is kept this much wider than asked, for askers who skip more


def key_id(key: str) -> int:
    return int.from_bytes(hashlib.sha1(key.encode()).digest(), "big")


@dataclass
class Record:
    """What one server holds under one key: a bundle marker, or an announcement shard."""

    expires: float
    value: Any = None  # a bundle's (author, round)
    subkeys: dict[str, tuple[int, float]] = field(default_factory=dict)  # shard: PeerID -> (round, expiry)
    # A shard's stores in the order they came, (PeerID, (round, expiry)): a reader takes those
    # since its last read only (:meth:`Space.expiring_after`).
    log: list[tuple[str, tuple[int, float]]] = field(default_factory=list)
    log_expiry: list[float] = field(default_factory=list)  # each store's expiry, as in ``log``: bisected
    log_start: int = 0  # stores dropped from the log's front (it keeps the recent ones)
    # (expiry, PeerID) of each store, a heap: what expires next (:meth:`Space.shard_entries`).
    expiries: list[tuple[float, str]] = field(default_factory=list)


class _Window:
    """The servers ``width`` on each side of ``key`` in ``ring`` (id order), nearest ``key``
    (XOR) first: ``hosts``, and their ``places`` in ``ring``."""

    def __init__(self, ring: list[tuple[int, int]], key: int, width: int):
        self.pos = pos = bisect.bisect_left(ring, (key, -1))
        self.width = width
        lo = max(0, pos - width)
        window = ring[lo:pos + width]
        # A stable sort of places by distance: of two at one distance (one id), the lesser host first.
        order = sorted(range(len(window)), key=[i ^ key for i, _ in window].__getitem__)
        self.hosts = [window[j][1] for j in order]
        self.places = [lo + j for j in order]


class Space:
    """Server ids, which servers are up, and the records each holds."""

    def __init__(self, hosts: int, rng: random.Random):
        self.ids = [rng.getrandbits(_ID_BITS) for _ in range(hosts)]
        # Which servers of a region a node's table holds: those nearest its salt (:meth:`held`).
        self._salts = [rng.getrandbits(_ID_BITS) for _ in range(hosts)]
        self._sorted: list[tuple[int, int]] = []  # (id, host) of servers up or lately gone
        self.up: set[int] = set()
        self.gone: dict[int, float] = {}  # server -> when it went away
        self.records: list[dict[int, Record]] = [{} for _ in range(hosts)]
        # Per shard key, the latest announcement of each peer stored at any server, and the
        # servers holding it: what a read that missed nothing would bring (:meth:`read_gaps`).
        self.everywhere: dict[int, Record] = {}
        self.holders: dict[int, dict[str, list[int]]] = {}
        # key -> :class:`_Window`: :meth:`nearest`'s sort, kept while ``_sorted`` stays as it is
        # (emptied when it changes).
        self._windows: dict[int, _Window] = {}
        # Of each region :meth:`held` looked at, its servers ordered by their ids' low bits, and
        # the set of them; kept and emptied as ``_windows``.
        self._regions: dict[int, tuple[list[int], list[tuple[int, int, int, int]], set[int]]] = {}
        # Counts the servers that stopped being gone (came back, or were forgotten): a node's
        # knowledge of gone servers is stale when this moved (:meth:`still_gone`).
        self.returns = 0

    def server_up(self, host: int, now: float) -> None:
        self.forget_stale(now)
        if host not in self.up and host not in self.gone:
            bisect.insort(self._sorted, (self.ids[host], host))
            self._ring_changed()
        if self.gone.pop(host, None) is not None:
            self.returns += 1
        self.up.add(host)

    def server_down(self, host: int, now: float) -> None:
        self.forget_stale(now)
        self.up.discard(host)
        self.gone[host] = now

    def still_gone(self, known: set[int]) -> set[int]:
        """Of the servers ``known`` to be gone, those still gone and not yet forgotten."""
        return {h for h in known if h in self.gone}

    def forget_stale(self, now: float) -> None:
        """Servers gone longer than :data:`STALE_S` leave the model's routing knowledge."""
        stale = [h for h, t in self.gone.items() if now - t > STALE_S]
        for host in stale:
            del self.gone[host]
            self._sorted.remove((self.ids[host], host))
            self._ring_changed()
        self.returns += len(stale)

    def _ring_changed(self) -> None:
        self._windows.clear()
        self._regions.clear()

    def nearest(self, key: int, k: int, skip: set[int] | frozenset[int] = frozenset()) -> list[int]:
        """The ``k`` servers nearest ``key`` (XOR) among those up or lately gone, but ``skip``,
        of the ``4 * k + len(skip) + 8`` on each side of ``key`` in id order."""
        if not self._sorted:
            return []
        width = 4 * k + len(skip) + 8
        window = self._window(key, width)
        lo, hi = window.pos - width, window.pos + width
        nearest, places = window.hosts[:k], window.places[:k]
        # Mostly the k nearest are in the narrower window and none is skipped: no walk.
        if len(nearest) == k and lo <= min(places) and max(places) < hi and skip.isdisjoint(nearest):
            return nearest
        return list(islice((h for h, i in zip(window.hosts, window.places) if lo <= i < hi and h not in skip), k))

    def _window(self, key: int, width: int) -> _Window:
        """``_windows``' entry for ``key``, at least ``width`` wide on each side."""
        window = self._windows.get(key)
        if window is None or window.width < width:
            window = _Window(self._sorted, key, width + _WINDOW_SLACK)
            self._windows.pop(key, None)
            if len(self._windows) >= _WINDOWS_KEPT:
                del self._windows[next(iter(self._windows))]
            self._windows[key] = window
        return window

    def held(self, src: int, key: int, k: int, skip: set[int] | frozenset[int] = frozenset()) -> list[int]:
        """The ``k`` servers nearest ``key`` (XOR) that ``src``'s routing table holds, but
        ``skip``, nearest first: the key's ``k`` nearest when ``src`` is in the key's region
        or the region holds at most ``k`` servers; else ``k`` servers of the region, a draw
        of ``src``'s own that stays the same from one lookup to the next (hivemind keeps the
        servers it met first and adds others only as those go away)."""
        shift = _ID_BITS - REGION_BITS
        region = key >> shift
        if region == self.ids[src] >> shift:
            return self.nearest(key, k, skip)
        lows, by_low, members = self._region(region)
        if len(members) - len(members.intersection(skip)) <= k:
            return self.nearest(key, k, skip)
        # Ranked by their ids' low bits against src's salt: a draw that owes nothing to where the
        # servers sit in the region (the high bits), so it holds a key's nearest by chance alone.
        held: list[tuple[int, int]] = []
        _nearest_low(lows, by_low, 0, len(lows), self._salts[src] & _LOW, _LOW_BITS - 1, k, skip, held)
        return [h for _, h in sorted(held, key=lambda entry: entry[0] ^ key)]

    def _region(self, region: int) -> tuple[list[int], list[tuple[int, int, int, int]], set[int]]:
        """``_regions``' entry for ``region``: the low bits of its servers' ids, sorted; the
        servers as (low bits, place in id order, id, host) in that order; their hosts."""
        entry = self._regions.get(region)
        if entry is None:
            ring, shift = self._sorted, _ID_BITS - REGION_BITS
            lo = bisect.bisect_left(ring, (region << shift, -1))
            hi = bisect.bisect_left(ring, ((region + 1) << shift, -1))
            by_low = sorted((i & _LOW, n, i, h) for n, (i, h) in enumerate(ring[lo:hi]))
            entry = self._regions[region] = [e[0] for e in by_low], by_low, {e[3] for e in by_low}
        return entry

    def servers(self) -> int:
        return len(self.up)

    def holds(self, host: int, key: int, now: float) -> Record | None:
        record = self.records[host].get(key)
        if record is None:
            return None
        if record.expires < now:
            del self.records[host][key]
            return None
        return record

    def put_bundle(self, host: int, key: int, author: int, round_no: int, expires: float) -> None:
        self.records[host][key] = Record(expires, (author, round_no))

    def put_announcement(self, host: int, key: int, peer: str, round_no: int, expires: float) -> None:
        record = self.records[host].get(key)
        if record is None:
            record = self.records[host][key] = Record(expires)
        _log_store(record, peer, (round_no, expires))
        everywhere = self.everywhere.get(key)
        if everywhere is None:
            everywhere = self.everywhere[key] = Record(expires)
        holders = self.holders.setdefault(key, {})
        if everywhere.subkeys.get(peer) == (round_no, expires):
            holders[peer].append(host)
        else:
            _log_store(everywhere, peer, (round_no, expires))
            holders[peer] = [host]

    def read_gaps(self, key: int, expiry: float, got: dict[str, tuple[int, float]], now: float
                  ) -> tuple[int, int, int]:
        """Of ``key``'s announcements stored at any server that expire after ``expiry`` (as
        :meth:`expiring_after`), how many there are, and how many a read that brought ``got``
        (peer -> (round, ...)) lacked a round of: held by a server up, and held only by
        servers down (asleep: no read could have them)."""
        record = self.everywhere.get(key)
        if record is None:
            return 0, 0, 0
        news = self.expiring_after(record, expiry, now)
        lacked = [p for p, (round_no, _) in news.items() if got.get(p, (-1, 0.0))[0] < round_no]
        holders, up = self.holders[key], self.up
        reachable = sum(1 for p in lacked if any(h in up for h in holders[p]))
        return len(news), reachable, len(lacked) - reachable

    def shard_entries(self, record: Record, now: float) -> dict[str, tuple[int, float]]:
        """A shard's announcements not expired (expired ones are dropped, the rest keep their order)."""
        expiries, live = record.expiries, record.subkeys
        while expiries and expiries[0][0] < now:
            _, peer = heapq.heappop(expiries)
            entry = live.get(peer)
            if entry is not None and entry[1] < now:  # else stored again since
                del live[peer]
        return live

    def expiring_after(self, record: Record, expiry: float, now: float) -> dict[str, tuple[int, float]]:
        """Of shard ``record``'s announcements held at ``now``, those expiring after ``expiry``
        (stored after it less their time to live): what came since a reader's last read, found
        from the stores' log where it reaches back that far, without a walk over the shard."""
        live = self.shard_entries(record, now)
        log, log_expiry = record.log, record.log_expiry
        if record.log_start and (not log or log_expiry[0] > expiry):  # stores dropped from the log may be among them
            return {p: v for p, v in live.items() if v[1] > expiry}
        return {p: v for p, v in log[bisect.bisect_right(log_expiry, expiry):] if live.get(p) == v}


def _log_store(record: Record, peer: str, entry: tuple[int, float]) -> None:
    """Store ``peer``'s announcement ``entry`` (round, expiry) in shard ``record``, and in its log."""
    record.subkeys[peer] = entry
    record.log.append((peer, entry))
    record.log_expiry.append(entry[1])
    if len(record.log) > 2 * len(record.subkeys) + 64:
        dropped = len(record.log) // 2
        del record.log[:dropped]
        del record.log_expiry[:dropped]
        record.log_start += dropped
    record.expires = max(record.expires, entry[1])
    heapq.heappush(record.expiries, (entry[1], peer))


def _nearest_low(lows: list[int], by_low: list[tuple[int, int, int, int]], lo: int, hi: int, salt: int,
                 bit: int, k: int, skip: set[int] | frozenset[int], out: list[tuple[int, int]]) -> None:
    """Add to ``out`` the (id, host) of ``by_low[lo:hi]``'s servers but ``skip`` nearest ``salt``
    by their low bits (XOR; of two alike, the first in id order) until it holds ``k``: what
    ``heapq.nsmallest`` gives over them all, from a walk down the bits of the sorted
    ``lows`` (those of ``by_low``; ``lows[lo:hi]`` share their bits above ``bit``) that
    visits the nearer half first and ranks a few dozen servers only."""
    if hi - lo <= 2 * k or bit < 0:
        ranked = sorted((low ^ salt, n, i, h) for low, n, i, h in by_low[lo:hi] if h not in skip)
        out.extend((i, h) for _, _, i, h in ranked[:k - len(out)])
        return
    mid = bisect.bisect_left(lows, (lows[lo] >> bit | 1) << bit, lo, hi)
    halves = ((lo, mid), (mid, hi)) if not salt >> bit & 1 else ((mid, hi), (lo, mid))
    for start, end in halves:
        if len(out) < k and start < end:
            _nearest_low(lows, by_low, start, end, salt, bit - 1, k, skip, out)


def plan_lookup(space: Space, src: int, keys: list[int], gone_known: set[int],
                workers: int = NUM_WORKERS) -> list[list[int]]:
    """For each of ``keys``, the servers one ``get_many``/``store_many`` traversal of all
    ``keys`` with ``workers`` visits, in the order it visits them, waves of
    :func:`per_key_workers` requests:
    the first wave the nearest servers ``src``'s table holds (:meth:`Space.held`), then the
    beam (the key's ``bucket_size`` nearest servers) nearest first, which the first wave's
    answers list. ``gone_known``: servers ``src`` knows are gone. A caller that wants the
    first copy only stops at the first wave that found one."""
    skip = gone_known | {src}
    workers = per_key_workers(len(keys), workers)
    out = []
    for key in keys:
        first = space.held(src, key, BUCKET_SIZE, skip)[:workers]
        out.append(first + [h for h in space.nearest(key, BUCKET_SIZE, skip) if h not in first])
    return out


def per_key_workers(keys: int, workers: int = NUM_WORKERS) -> int:
    """Requests in flight for one key when a call with ``workers`` looks up ``keys`` at once."""
    return max(1, workers // max(1, keys))


def keys_per_request(keys: int) -> int:
    """``queries_per_call`` of a traversal of ``keys`` keys."""
    return max(1, min(int(keys ** 0.5), CHUNK_SIZE))
