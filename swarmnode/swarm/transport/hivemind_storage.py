"""hivemind's local DHT storage within bounds: what a node or relay holds of the swarm's records.

:class:`BoundedStorage` is installed in every DHT this project runs (a node's DHT process, a
relay's DHT server) in place of hivemind's unbounded storage and cache
(:func:`~swarmnode.compat.hivemind.replace_storage`). Its room is split over signers by
:class:`~swarmnode.swarm.transport.room.Room` (bytes per signer and in all, newcomers a
quarter of it together), each record counted with what it costs in memory
(:data:`ENTRY_OVERHEAD`). What it refuses it refuses before the record's expensive check
(decompression, signature), and what it evicts leaves nothing behind in hivemind's
structures. Refusals and evictions are counted in
:data:`~swarmnode.swarm.transport.hivemind_records.COUNTS`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from hivemind.dht.validation import DHTRecord
from hivemind.utils import MSGPackSerializer, get_dht_time

from swarmnode.compat.hivemind import DHTID, DHTLocalStorage, DictionaryDHTValue, compact_expirations
from swarmnode.swarm.transport.hivemind_layout import SUBKEYS_PER_KEY
from swarmnode.swarm.transport.hivemind_records import COUNTS, SwarmRecordValidator, refuse
from swarmnode.swarm.transport.room import Room

STORAGE_BYTES = 24 * 1024 * 1024  # this node's share of the swarm's records
CACHE_BYTES = 8 * 1024 * 1024  # records peers ask this node to cache
SIGNER_BYTES = 1024 * 1024  # one signer's records in either (a few large bundles, hundreds of usual ones)
# What a stored record costs beyond its value and subkey: the Python objects hivemind and this
# storage keep for it (tracemalloc: 2,110 bytes for a record alone under its key, with its
# key id, dictionary, heap entries, accounting and its signer's standing; 1,293 beside
# others under one key), so that many small records cannot hold more memory than counted.
ENTRY_OVERHEAD = 2200
# A record is replaced only by one expiring this much later: each re-store is a heap entry,
# so a record's re-stores are held to 1 / MIN_REFRESH a second.
MIN_REFRESH = 0.25

Check = Callable[[DHTRecord], "str | None"]


class BoundedStorage(DHTLocalStorage):
    """hivemind's local DHT storage within ``budget`` bytes and ``per_signer`` bytes a signer
    (the subkey: every record this swarm stores is signed by its subkey's PeerID), split as
    :class:`~swarmnode.swarm.transport.room.Room` says; a signer's *first* record is the one
    expiring first.

    A record the room rules would refuse outright is refused before ``check`` (the record's
    whole validity check, run only on records that will be kept). Only subkeyed records are
    stored (the validator admits no other), a record is replaced only by one expiring at
    least :data:`MIN_REFRESH` later, and at most ``per_key`` signers are held under one key
    (a new one beyond is refused until some expire). An evicted record takes its key with it
    when it was the key's last, and hivemind's heaps are kept free of stale entries. Counted
    in ``COUNTS``: ``evicted``, ``refused_*``.
    """

    def __init__(self, budget: int, per_signer: int, per_key: int = SUBKEYS_PER_KEY, *,
                 check: Check | None = None, room: Room[DHTID] | None = None):
        super().__init__()
        self.room: Room[DHTID] = room or Room(budget, per_signer)
        self.per_key = per_key
        self.check = check
        self._subkeys: Counter[DHTID] = Counter()  # signers held under each key
        self._purged_at = 0.0

    @property
    def budget(self) -> int:
        return self.room.budget

    @property
    def total(self) -> int:
        return self.room.total

    def stats(self) -> dict[str, int]:
        return self.room.stats()

    def store(self, key: DHTID, value: Any, expiration_time: float, subkey: Any = None) -> bool:
        if subkey is None:
            return refuse("not_subkeyed")
        return self.store_subkey(key, subkey, value, expiration_time)

    def store_subkey(self, key: DHTID, subkey: Any, value: bytes, expiration_time: float) -> bool:
        if not isinstance(subkey, str) or not isinstance(value, bytes):
            return refuse("malformed")
        size = len(value) + len(subkey) + ENTRY_OVERHEAD
        room = self.room
        old = room.held(subkey, key)
        if old is not None and expiration_time < old[1] + MIN_REFRESH:
            return refuse("too_frequent")
        if size > room.per_signer:
            return refuse("too_large")
        if old is None and self._subkeys[key] >= self.per_key:
            return refuse("key_full")  # the signers already held keep their place
        now = get_dht_time()
        self._purge_expired(now)
        room.tick(now)
        reason = room.refused_outright(subkey, size, key)
        if reason is None and self.check is not None:
            reason = self.check(DHTRecord(key.to_bytes(), MSGPackSerializer.dumps(subkey), value, expiration_time))
        if reason is None:
            gone, reason = room.make_room(subkey, key, size)
            for signer, victim in gone:
                self._drop(signer, victim)
                COUNTS["evicted"] += 1
        if reason is not None:
            return refuse(reason)
        if not super().store_subkey(key, subkey, value, expiration_time):
            return False
        found = super().get(key)
        if found is not None and isinstance(found.value, DictionaryDHTValue):
            compact_expirations(found.value)
        self._subkeys[key] += old is None
        room.add(subkey, key, size, expiration_time)
        return True

    def _drop(self, signer: str, key: DHTID) -> None:
        """Remove ``signer``'s record under ``key`` (already out of the room's accounting), and
        the key with it when no other signer holds a record there."""
        self._subkeys[key] -= 1
        if self._subkeys[key] <= 0:
            del self._subkeys[key]
        found = super().get(key)
        if found is not None and isinstance(found.value, DictionaryDHTValue):
            del found.value[signer]
            if not found.value:
                del self[key]

    def _purge_expired(self, now: float) -> None:
        """Forget the accounting of records hivemind has let expire, and hivemind's stale heap
        entries (at most once a second)."""
        if now - self._purged_at < 1.0:
            return
        self._purged_at = now
        for signer, key in self.room.ordered_before(now):
            self.room.remove(signer, key)
            self._subkeys[key] -= 1
            if self._subkeys[key] <= 0:
                del self._subkeys[key]
        compact_expirations(self)


def bounded_storage(checker: SwarmRecordValidator) -> tuple[BoundedStorage, BoundedStorage]:
    """A storage (:data:`STORAGE_BYTES`) and a cache (:data:`CACHE_BYTES`) for one DHT, each
    checking the records it keeps with ``checker``'s whole check."""
    return (BoundedStorage(STORAGE_BYTES, SIGNER_BYTES, check=checker.check_stored),
            BoundedStorage(CACHE_BYTES, SIGNER_BYTES, check=checker.check_stored))
