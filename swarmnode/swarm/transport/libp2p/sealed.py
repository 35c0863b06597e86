"""A private swarm's seal on libp2p's streams: which protocols are sealed, under which key,
and the sealing and opening of their requests and answers (no I/O; the streams call it in
:mod:`~swarmnode.swarm.transport.libp2p.streams`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from swarmnode.swarm.sealing import ANNOUNCE, BUNDLE, OVERHEAD, Sealer, SealRefused
from swarmnode.swarm.transport.libp2p.holding import BUNDLE_PROTOCOL, HOLD_PROTOCOL
from swarmnode.swarm.transport.libp2p.named import NAMED_PROTOCOL
from swarmnode.swarm.transport.libp2p.spread import ANNOUNCE_PROTOCOL, SAMPLE_PROTOCOL

# What each sealed protocol carries: the key it is sealed under.
SEALED_PROTOCOLS = {BUNDLE_PROTOCOL: BUNDLE, HOLD_PROTOCOL: BUNDLE, ANNOUNCE_PROTOCOL: ANNOUNCE,
                    SAMPLE_PROTOCOL: ANNOUNCE, NAMED_PROTOCOL: ANNOUNCE}
REQUEST, ANSWER = b"request", b"answer"


@dataclass
class StreamSeal:
    """A private swarm's seal on the streams of :data:`SEALED_PROTOCOLS` (none: ``sealer`` is
    None, a public swarm, whose bytes stay as they are). Every request is sealed, even an empty
    one (an outsider's ask is refused, not answered); an empty answer ("nothing") stays empty.
    The associated data binds the protocol and the direction. What does not open is counted in
    ``counts`` (the host's refusals by reason, host thread only)."""

    sealer: Sealer | None
    counts: Counter[str]

    def _purpose(self, protocol: str) -> str | None:
        return SEALED_PROTOCOLS.get(protocol) if self.sealer is not None else None

    def limit(self, protocol: str, limit: int) -> int:
        """The bytes to read for a message of at most ``limit`` bytes once opened."""
        return limit + OVERHEAD if self._purpose(protocol) else limit

    def close(self, protocol: str, direction: bytes, data: bytes) -> bytes:
        purpose = self._purpose(protocol)
        if purpose is None or self.sealer is None or (direction == ANSWER and not data):
            return data
        return self.sealer.seal(purpose, data, protocol.encode() + b"\0" + direction)

    def open(self, protocol: str, direction: bytes, data: bytes, limit: int) -> bytes | None:
        """``data`` opened (at most ``limit`` bytes), or None when it does not open (counted)."""
        purpose = self._purpose(protocol)
        if purpose is None or self.sealer is None or (direction == ANSWER and not data):
            return data
        try:
            return self.sealer.open(purpose, data, limit, protocol.encode() + b"\0" + direction)
        except SealRefused as exc:
            self.counts[exc.reason] += 1
            return None


PLAIN = StreamSeal(None, Counter())  # a public swarm's streams
