"""Who holds what of a bounded store of peers' records, and whose record leaves when it is full.

:class:`Room` is the accounting both transports' stores share: a node's or relay's DHT
storage (:class:`~swarmnode.swarm.transport.hivemind.storage.BoundedStorage`) and the
bundles a public libp2p node holds for private ones
(:class:`~swarmnode.swarm.transport.libp2p.holding.BundleStore`). Keys are free, so the
room is split over *signers* (the PeerID a record is signed by), as the pool splits its
groups (:class:`~swarmnode.swarm.standing.PeerShare`):

* a signer holds at most ``per_signer`` bytes; over it, its own first record leaves;
* signers this store has not known for long (*newcomers*: not yet established by a
  :class:`~swarmnode.swarm.standing.Standing` whose rounds are slots of :data:`SLOT_S`
  seconds, so a signer must store here in :data:`PROBATION_SLOTS` distinct minutes, and at
  most :data:`PROMOTIONS_PER_SLOT` are promoted a minute) hold at most ``newcomer_share`` of
  the budget together; over it, the newcomer holding the most gives way;
* over the budget, the established signer holding the most gives way (a newcomer, when no
  signer is established);
* a writer that would then hold the most of its class, or within :data:`TIE_BYTES` of it,
  gives way itself (its own first record), and one with nothing to give is refused. So every
  signer keeps at least an equal share of its class's room, and a crowd of new keys, however
  large, shares one minority slice and never displaces an established signer's records. The
  margin keeps a crowd from churning that slice with records a few bytes smaller each: to
  displace a holder, a record must be 4 KiB smaller than what that holder holds, so a crowd
  filling the slice with ever smaller records is done after about
  slice / 4 KiB x ln(largest / smallest record) of them (some 4,500 for 116 KB records and
  6 MiB), and every later one is refused before its check.

A record a writer holding nothing else would be refused anyway is refused by
:meth:`Room.refused_outright`, which a store asks before checking the record (decompression,
signature): a crowd beyond its share costs a store a few dictionary lookups a record. This
module does no I/O and imports no network stack; time comes in as ``now``.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Generic, Hashable, TypeVar

from swarmnode.swarm.standing import PeerShare, Standing
from swarmnode.swarm.transport.counters import RoomGauges

NEWCOMER_SHARE = 0.25
SLOT_S = 60.0
PROBATION_SLOTS = 3
PROMOTIONS_PER_SLOT = 2
TIE_BYTES = 4096

K = TypeVar("K", bound=Hashable)


class Room(Generic[K]):
    """The accounting of one store: each signer's records (``item`` -> (bytes, order); its
    *first* record is the one of least order: the one expiring first, or the oldest), bytes
    by signer and by class. Not thread-safe: its store serialises calls."""

    def __init__(self, budget: int, per_signer: int, *, newcomer_share: float = NEWCOMER_SHARE,
                 standing: Standing | None = None):
        self.budget, self.per_signer = budget, per_signer
        self.newcomer_room = PeerShare(newcomer_share=newcomer_share).newcomers(budget)
        self.standing = standing or Standing(probation_rounds=PROBATION_SLOTS, promotions_per_round=PROMOTIONS_PER_SLOT)
        self.total = 0
        self._held: dict[str, dict[K, tuple[int, float]]] = {}
        self._bytes: Counter[str] = Counter()
        self._class: dict[str, bool] = {}  # signer -> established, as its bytes are counted
        self._class_bytes = {True: 0, False: 0}
        self._heaps: dict[bool, list[tuple[int, str]]] = {True: [], False: []}  # (-bytes, signer), stale skipped

    # -- what is held ---------------------------------------------------------------------

    def held(self, signer: str, item: K) -> tuple[int, float] | None:
        """(bytes, order) of ``signer``'s record ``item``, None when it holds none there."""
        return self._held.get(signer, {}).get(item)

    def order(self, signer: str, item: K) -> float:
        """The order of ``signer``'s record ``item``, which it holds here (KeyError otherwise)."""
        return self._held[signer][item][1]

    def items(self, signer: str) -> list[K]:
        return list(self._held.get(signer, {}))

    def established(self, signer: str) -> bool:
        return self.standing.is_established(signer)

    def stats(self) -> RoomGauges:
        """Bytes held by newcomers and by established signers, and how many signers each."""
        signers = Counter(self._class.values())
        return RoomGauges(newcomer_bytes=self._class_bytes[False], established_bytes=self._class_bytes[True],
                          newcomers=signers[False], established=signers[True])

    # -- the rules --------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Time is ``now``: a new slot of the standing promotes the qualified, whose bytes
        then count as established."""
        for signer in self.standing.advance(int(now // SLOT_S)):
            if signer in self._class:
                held = self._bytes[signer]
                self._set_bytes(signer, held, held)

    def refused_outright(self, signer: str, size: int, item: K | None) -> str | None:
        """The refusal :meth:`make_room` would give a writer that holds nothing here but the
        record it replaces under ``item`` (None: a record that replaces none), when its class
        is full and it would hold the most of it (``newcomers_full``, ``storage_full``); None
        when the record may fit."""
        old_size = (self.held(signer, item) or (0, 0.0))[0] if item is not None else 0
        if self._bytes[signer] - old_size > 0:
            return None  # a writer with other records makes room from them
        established = self.established(signer)
        if not established and self._class_bytes[False] - old_size + size > self.newcomer_room:
            largest = self._largest(False)
            if largest is None or size + TIE_BYTES > self._bytes[largest]:
                return "newcomers_full"
        if self.total - old_size + size > self.budget and self._victim_class() == established:
            largest = self._largest(established)
            if largest is None or size + TIE_BYTES > self._bytes[largest]:
                return "storage_full"
        return None

    def make_room(self, signer: str, item: K, size: int) -> tuple[list[tuple[str, K]], str | None]:
        """Make room for ``signer``'s record of ``size`` bytes under ``item`` (replacing what it
        holds there): the records that leave, as (signer, item), already dropped from the
        accounting (the store must drop them too), and the refusal reason if it still does
        not fit (``signer_full``, ``newcomers_full``, ``storage_full``), else None."""
        gone: list[tuple[str, K]] = []
        old_size = (self.held(signer, item) or (0, 0.0))[0]
        grows = size - old_size
        established = self.established(signer)
        while self._bytes[signer] + grows > self.per_signer:
            if not self._drop_first(signer, item, gone):
                return gone, "signer_full"
        if not established:
            while self._class_bytes[False] + grows > self.newcomer_room:
                if not self._give_way(False, signer, established, grows, item, gone):
                    return gone, "newcomers_full"
        while self.total + grows > self.budget:
            if not self._give_way(self._victim_class(), signer, established, grows, item, gone):
                return gone, "storage_full"
        return gone, None

    def add(self, signer: str, item: K, size: int, order: float) -> None:
        """``signer`` now holds ``size`` bytes under ``item`` (its order: expiry or arrival);
        a record of it counts towards its standing."""
        self._account(signer, item, size, order)
        self.standing.note(signer, useful=True)

    def remove(self, signer: str, item: K) -> None:
        """``signer``'s record under ``item`` is gone (expired, or dropped by the store)."""
        if self.held(signer, item) is not None:
            self._account(signer, item, 0, None)

    def ordered_before(self, order: float) -> list[tuple[str, K]]:
        """Every record of order below ``order`` (in a DHT storage: expired before then)."""
        return [(signer, item) for signer, held in self._held.items() for item, (_, o) in held.items() if o < order]

    # -- internals --------------------------------------------------------------------------

    def _victim_class(self) -> bool:
        """Whose records leave when the store is over budget: established signers', if any."""
        return self._largest(True) is not None

    def _give_way(self, victims: bool, writer: str, writer_established: bool, grows: int, keep: K,
                  gone: list[tuple[str, K]]) -> bool:
        """Drop the first record of class ``victims``' largest holder (True: established), or
        the writer's own if it is of that class and would then hold the most (within
        :data:`TIE_BYTES`); False when nothing can go."""
        victim = self._largest(victims)
        if victim is None or (writer_established == victims
                              and self._bytes[writer] + grows + TIE_BYTES > self._bytes[victim]):
            victim = writer
        return self._drop_first(victim, keep, gone)

    def _drop_first(self, signer: str, keep: K, gone: list[tuple[str, K]]) -> bool:
        """Drop ``signer``'s first record (never the one under ``keep``)."""
        held = self._held.get(signer, {})
        first = min((i for i in held if i != keep), key=lambda i: held[i][1], default=None)
        if first is None:
            return False
        self._account(signer, first, 0, None)
        gone.append((signer, first))
        return True

    def _account(self, signer: str, item: K, size: int, order: float | None) -> None:
        """Set (or with ``order`` None, drop) what ``signer`` holds under ``item``."""
        held = self._held.setdefault(signer, {})
        old = held.pop(item, None)
        if order is not None:
            held[item] = (size, order)
        if not held:
            del self._held[signer]
        before = self._bytes[signer]
        after = before + (size if order is not None else 0) - (old[0] if old else 0)
        self.total += after - before
        self._set_bytes(signer, before, after)

    def _set_bytes(self, signer: str, before: int, after: int) -> None:
        """Move ``signer`` from ``before`` bytes in its counted class to ``after`` bytes in its
        class now (a promotion moves it)."""
        if signer in self._class:
            self._class_bytes[self._class.pop(signer)] -= before
        if after <= 0:
            self._bytes.pop(signer, None)
            return
        established = self.established(signer)
        self._bytes[signer] = after
        self._class[signer] = established
        self._class_bytes[established] += after
        heap = self._heaps[established]
        heapq.heappush(heap, (-after, signer))
        if len(heap) > 2 * len(self._class) + 64:  # stale entries: one a change of any signer's bytes
            heap[:] = [(-b, s) for s, b in self._bytes.items() if self._class[s] == established]
            heapq.heapify(heap)

    def _largest(self, established: bool) -> str | None:
        heap = self._heaps[established]
        while heap:
            neg, signer = heap[0]
            if self._bytes.get(signer) == -neg and self._class.get(signer) == established:
                return signer
            heapq.heappop(heap)
        return None
