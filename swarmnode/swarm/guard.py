"""Per-peer rate limits and temporary bans on incoming bundles.

Two checkpoints, both cheap:

* :meth:`PeerGuard.admit`, before a message is queued for verification: one token from the
  sender's bucket, or the message is dropped unread (``rate_limited``), and a banned sender's
  messages are dropped the same way (``banned``). The sender here is the key named in the
  bundle header, not yet verified; a key counts as that peer only once one of its bundles has
  been authenticated (:meth:`PeerGuard.judge`), so garbage and first contacts share the one
  ``unknown`` bucket and cannot spend a known peer's tokens by inventing keys. Both real
  transports deliver only bundles signed by the peer that sent them (libp2p pull check,
  DHT subkey owner check), so on the wire the header key is the real sender.
* :meth:`PeerGuard.judge`, after verification: a bundle that only its signer could have made
  wrong (a structural violation, see :data:`HOSTILE_REASONS`) is a strike; so, more lightly,
  is flooding past the rate. Past a threshold the peer is banned for ``ban_s`` seconds, logged
  once per ban. Strikes leak away over ``strike_window_s``, so an honest peer with one bad
  bundle now and then is never banned. Reasons a third party or a clock could cause (replay,
  round window, stale, future, wrong swarm) never count.

Everything is bounded: at most ``max_peers`` peers are remembered (least recently seen
forgotten first). Thread-safe.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from swarmnode.swarm.bundle import MAGIC, SIGNING_DOMAINS
from swarmnode.swarm.identity import name_from_peer_id, peer_id_from_public_key
from swarmnode.swarm.pool import UNKNOWN_PEER

log = logging.getLogger(__name__)

# Reasons the guard drops a message for, next to bundle.REASONS in the peer table.
GUARD_REASONS = ("rate_limited", "banned")
# Rejections only the signing key's holder can produce: an honest swarmnode never sends them.
HOSTILE_REASONS = frozenset({"bad_field", "too_many_groups", "too_many_responses", "response_too_long",
                             "question_too_long", "field_too_long", "metadata_too_large"})
_KEY = slice(len(MAGIC) + 1, len(MAGIC) + 1 + 32)


@dataclass(frozen=True)
class GuardLimits:
    """An honest node sends about one bundle a round (seconds to minutes), so these leave a
    wide margin while cutting a flood to a trickle."""

    rate: float = 2.0              # bundles a second, per known peer
    burst: float = 20.0
    unknown_rate: float = 10.0     # shared by every sender not yet authenticated
    unknown_burst: float = 50.0
    ban_after_invalid: float = 10  # hostile bundles within about strike_window_s
    ban_after_flood: float = 500   # messages over the rate within about strike_window_s
    strike_window_s: float = 60.0
    ban_s: float = 600.0
    max_peers: int = 10_000


class _Peer:
    __slots__ = ("authenticated", "banned_until", "flood", "invalid", "refilled", "struck", "tokens")

    def __init__(self, burst: float, now: float):
        self.tokens = burst
        self.refilled = now
        self.invalid = 0.0
        self.flood = 0.0
        self.struck = now
        self.banned_until: float | None = None
        self.authenticated = False


def claimed_sender(data: bytes) -> str | None:
    """The PeerID of the key in a bundle's header, unverified; None when there is no header."""
    if not isinstance(data, (bytes, bytearray)) or len(data) < _KEY.stop or data[:len(MAGIC)] != MAGIC \
            or data[len(MAGIC)] not in SIGNING_DOMAINS:
        return None
    return peer_id_from_public_key(bytes(data[_KEY]))


class PeerGuard:
    """Token buckets and bans per peer. ``clock`` is monotonic seconds (tests pass their own);
    ``on_ban(peer_id, seconds, why)`` is called once per ban, after the log line."""

    def __init__(self, limits: GuardLimits = GuardLimits(), *, clock: Callable[[], float] = time.monotonic,
                 on_ban: Callable[[str, float, str], None] | None = None):
        self.limits = limits
        self._clock = clock
        self._on_ban = on_ban
        self._peers: OrderedDict[str, _Peer] = OrderedDict()
        self._lock = threading.Lock()

    def admit(self, data: bytes) -> tuple[str, str | None]:
        """``(bucket, reason)`` for a message about to be queued: ``reason`` is None to let it
        through, else ``rate_limited`` or ``banned``. ``bucket`` is the sender's PeerID when
        that key was authenticated before, else ``"unknown"``."""
        try:
            claimed = claimed_sender(data)
        except ValueError:
            claimed = None
        with self._lock:
            now = self._clock()
            known = self._peers.get(claimed) if claimed is not None else None
            if claimed is not None and known is not None and known.authenticated:
                bucket, peer = claimed, known
                rate, burst = self.limits.rate, self.limits.burst
            else:
                bucket, peer = UNKNOWN_PEER, self._peer(UNKNOWN_PEER, now)
                rate, burst = self.limits.unknown_rate, self.limits.unknown_burst
            self._peers.move_to_end(bucket)
            if peer.banned_until is not None:
                if now < peer.banned_until:
                    return bucket, "banned"
                peer.banned_until = None
            peer.tokens = min(burst, peer.tokens + (now - peer.refilled) * rate)
            peer.refilled = now
            if peer.tokens >= 1.0:
                peer.tokens -= 1.0
                return bucket, None
            if bucket != UNKNOWN_PEER:  # "unknown" is everyone: it is throttled, never banned
                self._strike(bucket, peer, now, flood=1.0)
            return bucket, "rate_limited"

    def judge(self, sender: str | None, reason: str | None) -> None:
        """A verified message's outcome: ``sender`` is the authenticated sender (None when the
        signature never verified), ``reason`` the rejection reason or None when accepted."""
        if sender is None:
            return
        with self._lock:
            now = self._clock()
            peer = self._peer(sender, now)
            peer.authenticated = True
            if reason in HOSTILE_REASONS:
                self._strike(sender, peer, now, invalid=1.0)

    def banned_until(self, peer_id: str) -> float | None:
        """Wall-clock time (epoch seconds) the peer's ban ends, or None when it is not banned."""
        with self._lock:
            peer = self._peers.get(peer_id)
            now = self._clock()
            if peer is None or peer.banned_until is None or peer.banned_until <= now:
                return None
            return time.time() + (peer.banned_until - now)

    def _peer(self, peer_id: str, now: float) -> _Peer:
        """The peer's record, created if new; call with the lock held."""
        peer = self._peers.get(peer_id)
        if peer is None:
            burst = self.limits.unknown_burst if peer_id == UNKNOWN_PEER else self.limits.burst
            peer = self._peers[peer_id] = _Peer(burst, now)
            while len(self._peers) > self.limits.max_peers:
                self._peers.popitem(last=False)
        else:
            self._peers.move_to_end(peer_id)
        return peer

    def _strike(self, peer_id: str, peer: _Peer, now: float, *, invalid: float = 0.0, flood: float = 0.0) -> None:
        """Add strikes (call with the lock held); ban past a threshold."""
        if peer.banned_until is not None and now < peer.banned_until:
            return
        keep = math.exp(-(now - peer.struck) / self.limits.strike_window_s)
        peer.invalid = peer.invalid * keep + invalid
        peer.flood = peer.flood * keep + flood
        peer.struck = now
        if peer.invalid >= self.limits.ban_after_invalid:
            why = f"{peer.invalid:.0f} invalid bundles"
        elif peer.flood >= self.limits.ban_after_flood:
            why = f"{peer.flood:.0f} bundles over its rate of {self.limits.rate:g}/s"
        else:
            return
        peer.banned_until = now + self.limits.ban_s
        peer.invalid = peer.flood = 0.0
        log.warning("ignoring peer %s (%s) for %.0f s: %s in about %.0f s", name_from_peer_id(peer_id), peer_id,
                    self.limits.ban_s, why, self.limits.strike_window_s)
        if self._on_ban is not None:
            self._on_ban(peer_id, self.limits.ban_s, why)
