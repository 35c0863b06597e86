"""hivemind's local DHT storage within bounds: what a node or relay holds of the swarm's records.

:class:`BoundedStorage` is installed in every DHT this project runs (a node's DHT process, a
relay's DHT server) in place of hivemind's unbounded storage and cache
(:func:`~swarmnode.compat.hivemind.replace_storage`). Its room is split over signers by
two :class:`~swarmnode.swarm.transport.room.Room`: one for bundle records (bytes per signer
and in all, newcomers a quarter of it together) and one for announcements
(:data:`ANNOUNCE_SHARE` of the budget, each announcement one slot of the same size), so a
crowd of keys announcing leaves the bundles' room alone and the other way round. Each
record is counted with what it costs in memory (:data:`ENTRY_OVERHEAD`). What it refuses it
refuses before the record's expensive check (decompression, signature), and what it evicts
leaves nothing behind in hivemind's structures. Refusals and evictions are counted in
:data:`~swarmnode.swarm.transport.hivemind.records.COUNTS`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Collection

from hivemind.dht.validation import DHTRecord
from hivemind.utils import MSGPackSerializer, get_dht_time

from swarmnode.compat.hivemind import DHTID, DHTLocalStorage, DictionaryDHTValue, compact_expirations
from swarmnode.swarm.transport.hivemind.layout import ANNOUNCE_SHARDS, SUBKEYS_PER_KEY, announce_key
from swarmnode.swarm.transport.hivemind.records import COUNTS, MAX_ANNOUNCE_BYTES, SwarmRecordValidator, refuse
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
# The announcements' room, of a storage's budget: 4 MiB of the 24 (about 1,800 announcements:
# a node holds the shards nearest its id, at most 1,024 announcements each).
ANNOUNCE_SHARE = 1 / 6
# What an announcement counts as, whatever its round: every refresh of one fits in its place.
ANNOUNCE_SLOT = MAX_ANNOUNCE_BYTES + 64 + ENTRY_OVERHEAD

Check = Callable[[DHTRecord], "str | None"]


class BoundedStorage(DHTLocalStorage):
    """hivemind's local DHT storage within ``budget`` bytes and ``per_signer`` bytes a signer
    (the subkey: every record this swarm stores is signed by its subkey's PeerID), split as
    :class:`~swarmnode.swarm.transport.room.Room` says; a signer's *first* record is the one
    expiring first. Records under ``announce_keys`` (the announcement shards) have a room of
    their own, :data:`ANNOUNCE_SHARE` of ``budget``, each counted as :data:`ANNOUNCE_SLOT`
    bytes.

    A record the room rules would refuse outright is refused before ``check`` (the record's
    whole validity check, run only on records that will be kept). Only subkeyed records are
    stored (the validator admits no other), a record is replaced only by one expiring at
    least :data:`MIN_REFRESH` later, and at most ``per_key`` signers are held under one key
    (a new one beyond is refused until some expire). An evicted record takes its key with it
    when it was the key's last, and hivemind's heaps are kept free of stale entries. Counted
    in ``COUNTS``: ``evicted``, ``refused`` by reason.
    """

    def __init__(self, budget: int, per_signer: int, per_key: int = SUBKEYS_PER_KEY, *,
                 check: Check | None = None, announce_keys: Collection[DHTID] = ()):
        super().__init__()
        announce_budget = int(budget * ANNOUNCE_SHARE) if announce_keys else 0
        self.room: Room[DHTID] = Room(budget - announce_budget, per_signer)
        self.announcements: Room[DHTID] = Room(announce_budget, ANNOUNCE_SLOT)
        self.announce_keys = frozenset(announce_keys)
        self.per_key = per_key
        self.check = check
        self._subkeys: Counter[DHTID] = Counter()  # signers held under each key
        self._purged_at = 0.0

    @property
    def budget(self) -> int:
        return self.room.budget + self.announcements.budget

    @property
    def total(self) -> int:
        return self.room.total + self.announcements.total

    def store(self, key: DHTID, value: Any, expiration_time: float, subkey: Any = None) -> bool:
        if subkey is None:
            return refuse("not_subkeyed")
        return self.store_subkey(key, subkey, value, expiration_time)

    def store_subkey(self, key: DHTID, subkey: Any, value: bytes, expiration_time: float) -> bool:
        if not isinstance(subkey, str) or not isinstance(value, bytes):
            return refuse("malformed")
        announcement = key in self.announce_keys
        size = ANNOUNCE_SLOT if announcement else len(value) + len(subkey) + ENTRY_OVERHEAD
        room = self.announcements if announcement else self.room
        old = room.held(subkey, key)
        if old is not None and expiration_time < old[1] + MIN_REFRESH:
            return refuse("too_frequent")
        if size > room.per_signer:
            return refuse("too_large")
        if old is None and self._subkeys[key] >= self.per_key:
            return refuse("key_full")  # the signers already held keep their place
        now = get_dht_time()
        self._purge_expired(now)
        self.room.tick(now)
        self.announcements.tick(now)
        reason = room.refused_outright(subkey, size, key)
        if reason is None and self.check is not None:
            reason = self.check(DHTRecord(key.to_bytes(), MSGPackSerializer.dumps(subkey), value, expiration_time))
        if reason is None:
            gone, reason = room.make_room(subkey, key, size)
            for signer, victim in gone:
                self._drop(signer, victim)
                COUNTS.evicted += 1
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
        held = found.value if found is not None else None
        if isinstance(held, DictionaryDHTValue):
            # hivemind's class decorator (MSGPackSerializer.ext_serializable) is typed to return a
            # plain `type`, so a type checker cannot narrow to DictionaryDHTValue
            del held[signer]  # pyright: ignore[reportIndexIssue, reportOptionalSubscript]
            if not held:
                del self[key]

    def _purge_expired(self, now: float) -> None:
        """Forget the accounting of records hivemind has let expire, and hivemind's stale heap
        entries (at most once a second)."""
        if now - self._purged_at < 1.0:
            return
        self._purged_at = now
        for room in (self.room, self.announcements):
            for signer, key in room.ordered_before(now):
                room.remove(signer, key)
                self._subkeys[key] -= 1
                if self._subkeys[key] <= 0:
                    del self._subkeys[key]
        compact_expirations(self)


def bounded_storage(checker: SwarmRecordValidator) -> tuple[BoundedStorage, BoundedStorage]:
    """A storage (:data:`STORAGE_BYTES`) and a cache (:data:`CACHE_BYTES`) for one DHT, each
    checking the records it keeps with ``checker``'s whole check and keeping the swarm's
    announcements in a room of their own."""
    shards = [DHTID.generate(source=announce_key(checker.space, shard)) for shard in range(ANNOUNCE_SHARDS)]
    return (BoundedStorage(STORAGE_BYTES, SIGNER_BYTES, check=checker.check_stored, announce_keys=shards),
            BoundedStorage(CACHE_BYTES, SIGNER_BYTES, check=checker.check_stored, announce_keys=shards))
