"""hivemind's local DHT storage within bounds: what a node holds of the swarm's records.

:class:`BoundedStorage` is installed in the DHT process in place of hivemind's unbounded
storage and cache (:func:`~swarmnode.compat.hivemind.replace_storage`). It bounds bytes per
signer and in total, so a crowd of keys cannot fill a node; refusals and evictions are
counted in :data:`~swarmnode.swarm.transport.hivemind_records.COUNTS`.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Any

from hivemind.utils import get_dht_time

from swarmnode.compat.hivemind import DHTID, DHTLocalStorage, DictionaryDHTValue
from swarmnode.swarm.transport.hivemind_layout import SUBKEYS_PER_KEY
from swarmnode.swarm.transport.hivemind_records import COUNTS, refuse

STORAGE_BYTES = 24 * 1024 * 1024  # this node's share of the swarm's records
CACHE_BYTES = 8 * 1024 * 1024  # records peers ask this node to cache
SIGNER_BYTES = 1024 * 1024  # one signer's records in either (a few large bundles, hundreds of usual ones)
ENTRY_OVERHEAD = 512  # bytes a stored record costs beyond its value (keys, expiry, Python objects)
# A record is replaced only by one expiring this much later: hivemind keeps a heap entry per
# store until it expires, so each record's re-stores are held to 1 / MIN_REFRESH a second.
MIN_REFRESH = 0.25


class BoundedStorage(DHTLocalStorage):
    """hivemind's local DHT storage within ``budget`` bytes and ``per_signer`` bytes a signer
    (the subkey: every record this swarm stores is signed by its subkey's PeerID).

    Over a signer's bound, that signer's records expiring first leave; over the budget, the
    records expiring first of the signer holding the most bytes leave (the writer's own, if it
    would then hold the most; if it has none, the record is refused), so every signer keeps at
    least an equal share of the room whatever a crowd of keys stores. Only subkeyed
    records are stored (the validator admits no other), and a record is replaced only by one
    expiring at least :data:`MIN_REFRESH` later, so re-storing one record cannot grow
    hivemind's heaps faster than that. At most ``per_key`` signers are held under one key;
    a new one beyond is refused until some expire. Counted in ``COUNTS``: ``evicted``,
    ``refused_*``.
    """

    def __init__(self, budget: int, per_signer: int, per_key: int = SUBKEYS_PER_KEY):
        super().__init__()
        self.budget, self.per_signer, self.per_key = budget, per_signer, per_key
        self.total = 0
        self._subkeys: Counter[DHTID] = Counter()  # signers held under each key
        self._held: dict[str, dict[DHTID, tuple[int, float]]] = {}  # signer -> key -> (bytes, expiration)
        self._signer_bytes: Counter[str] = Counter()
        self._heap: list[tuple[int, str]] = []  # (-bytes, signer), stale entries skipped on pop
        self._purged_at = 0.0

    def store(self, key: DHTID, value: Any, expiration_time: float, subkey: Any = None) -> bool:
        if subkey is None:
            return refuse("not_subkeyed")
        return self.store_subkey(key, subkey, value, expiration_time)

    def store_subkey(self, key: DHTID, subkey: Any, value: bytes, expiration_time: float) -> bool:
        if not isinstance(subkey, str) or not isinstance(value, bytes):
            return refuse("malformed")
        size = len(value) + len(subkey) + ENTRY_OVERHEAD
        old = self._held.get(subkey, {}).get(key)
        if old is not None and expiration_time < old[1] + MIN_REFRESH:
            return refuse("too_frequent")
        if size > self.per_signer:
            return refuse("too_large")
        if old is None and self._subkeys[key] >= self.per_key:
            return refuse("key_full")  # the signers already held keep their place
        self._purge_expired()
        old_size = old[0] if old else 0
        while self._signer_bytes[subkey] - old_size + size > self.per_signer:
            if not self._evict_first(subkey, keep=key):
                return refuse("signer_full")
        while self.total - old_size + size > self.budget:
            victim = self._largest()
            if victim is None or self._signer_bytes[subkey] - old_size + size >= self._signer_bytes[victim]:
                victim = subkey  # the writer would hold the most: it makes room from its own records
            if not self._evict_first(victim, keep=key):
                return refuse("storage_full")
        if not super().store_subkey(key, subkey, value, expiration_time):
            return False
        self._account(subkey, key, size, expiration_time)
        return True

    def _account(self, signer: str, key: DHTID, size: int, expiration: float | None) -> None:
        """Set (or with ``expiration`` None, drop) what ``signer`` holds under ``key``."""
        held = self._held.setdefault(signer, {})
        old = held.pop(key, None)
        self._subkeys[key] += (expiration is not None) - (old is not None)
        if not self._subkeys[key]:
            del self._subkeys[key]
        delta = (size if expiration is not None else 0) - (old[0] if old else 0)
        if expiration is not None:
            held[key] = (size, expiration)
        if not held:
            del self._held[signer]
        self.total += delta
        self._signer_bytes[signer] += delta
        if self._signer_bytes[signer] <= 0:
            del self._signer_bytes[signer]
        else:
            heapq.heappush(self._heap, (-self._signer_bytes[signer], signer))

    def _largest(self) -> str | None:
        while self._heap:
            neg, signer = self._heap[0]
            if self._signer_bytes.get(signer) == -neg:
                return signer
            heapq.heappop(self._heap)
        return None

    def _evict_first(self, signer: str, keep: DHTID | None) -> bool:
        """Remove ``signer``'s record expiring first (never the one under ``keep``)."""
        held = {k: v for k, v in self._held.get(signer, {}).items() if k != keep}
        if not held:
            return False
        key = min(held, key=lambda k: held[k][1])
        found = super().get(key)
        if found is not None and isinstance(found.value, DictionaryDHTValue):
            del found.value[signer]
        self._account(signer, key, 0, None)
        COUNTS["evicted"] += 1
        return True

    def _purge_expired(self) -> None:
        """Forget the accounting of records hivemind has let expire (at most once a second)."""
        now = get_dht_time()
        if now - self._purged_at < 1.0:
            return
        self._purged_at = now
        for signer, held in list(self._held.items()):
            for key, (_, expiration) in list(held.items()):
                if expiration < now:
                    self._account(signer, key, 0, None)
