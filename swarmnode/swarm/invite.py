"""Invite codes: one line that tells a new node which swarm to join, over which transport, and
whom to dial first.

``swarmnode invite`` prints ``sn1.<data>``: ``sn`` and the format's version, a dot, then
URL-safe base64 (no padding) of a 2-byte big-endian length N, N bytes of zlib-compressed
canonical JSON ``{"s": swarm, "t": transport, "a": [multiaddr, ...]}`` (and ``"k"``, the swarm
key of a private swarm, when the node has one), and the first 4 bytes of the SHA-256 of those N
bytes. The length tells a code cut short from a mistyped one; the
checksum catches a changed character. ``swarmnode start --join CODE`` (config key ``join``)
makes the addresses its bootstrap list and takes the swarm name, transport and key from the
code. An invite without ``k`` (and any of an older release) is a public swarm's.

:func:`decode_invite` raises :class:`InviteError`, whose ``str()`` names the one problem, for
anything else; it never raises another error and bounds what it inflates.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from swarmnode.config import ConfigError, LoadedConfig, NodeConfig
from swarmnode.swarm.bootstrap import multiaddr_problem
from swarmnode.swarm.sealing import SwarmKeyError, check_swarm_key, parse_swarm_key

INVITE_VERSION = 1
PREFIX = "sn"
MAX_ADDRESSES = 8
MAX_JSON_BYTES = 4096
_CHECK = 4
TRANSPORTS = ("hivemind", "libp2p")


class InviteError(ValueError):
    """Not a usable invite; ``str()`` is one line saying what is wrong and what to do."""


@dataclass(frozen=True)
class Invite:
    swarm: str
    transport: str
    addresses: tuple[str, ...]
    swarm_key: str | None = None  # a private swarm's key (text form): whoever holds the invite can join


def encode_invite(invite: Invite) -> str:
    """The one-line code for ``invite`` (at most :data:`MAX_ADDRESSES` addresses kept)."""
    if not invite.addresses:
        raise InviteError("no address to put in the invite: the node has none other nodes can dial yet")
    body: dict[str, object] = {"s": invite.swarm, "t": invite.transport, "a": list(invite.addresses[:MAX_ADDRESSES])}
    if invite.swarm_key:
        body["k"] = invite.swarm_key
    packed = zlib.compress(json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8"), 9)
    raw = len(packed).to_bytes(2, "big") + packed + hashlib.sha256(packed).digest()[:_CHECK]
    return f"{PREFIX}{INVITE_VERSION}." + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_invite(code: str) -> Invite:
    """The invite in ``code`` (surrounding blanks ignored); :class:`InviteError` otherwise."""
    text = code.strip()
    head, dot, data = text.partition(".")
    if not dot or not head.startswith(PREFIX) or not head[len(PREFIX):].isdigit():
        raise InviteError(f"not a swarmnode invite: it should start with '{PREFIX}{INVITE_VERSION}.' "
                          f"(copy the whole line `swarmnode invite` printed)")
    version = int(head[len(PREFIX):])
    if version != INVITE_VERSION:
        raise InviteError(f"invite version {version} is not one this swarmnode reads (it reads version "
                          f"{INVITE_VERSION}); update swarmnode, or ask for an invite from a node of this version")
    try:
        raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    except (binascii.Error, ValueError):
        raise InviteError("the invite holds characters an invite never has: it was mistyped; copy it again") from None
    if len(raw) < 2:
        raise InviteError("the invite is cut short: copy the whole line")
    n = int.from_bytes(raw[:2], "big")
    if len(raw) < 2 + n + _CHECK:
        raise InviteError(f"the invite is cut short ({len(data)} characters, about "
                          f"{(2 + n + _CHECK) * 4 // 3} expected): copy the whole line")
    packed, check = raw[2:2 + n], raw[2 + n:2 + n + _CHECK]
    if len(raw) != 2 + n + _CHECK or hashlib.sha256(packed).digest()[:_CHECK] != check:
        raise InviteError("the invite's checksum does not match: it was mistyped; copy it again")
    try:
        inflater = zlib.decompressobj()
        text_json = inflater.decompress(packed, MAX_JSON_BYTES)
        if inflater.unconsumed_tail:
            raise InviteError(f"the invite's contents are over {MAX_JSON_BYTES} bytes")
        body = json.loads(text_json)
    except (zlib.error, ValueError) as exc:
        if isinstance(exc, InviteError):
            raise
        raise InviteError("the invite's checksum matches but its contents are not an invite") from None
    return _checked(body)


def _checked(body: object) -> Invite:
    if not isinstance(body, dict) or not isinstance(body.get("s"), str) or not isinstance(body.get("a"), list):
        raise InviteError("the invite's checksum matches but its contents are not an invite")
    swarm, transport, addresses = body["s"], body.get("t"), body["a"]
    if transport not in TRANSPORTS:
        raise InviteError(f"the invite names transport {transport!r}, which this swarmnode lacks "
                          f"(it has {', '.join(TRANSPORTS)}); update swarmnode")
    if not swarm or not addresses or len(addresses) > MAX_ADDRESSES:
        raise InviteError("the invite names no swarm or no address to dial")
    for address in addresses:
        problem = multiaddr_problem(address) if isinstance(address, str) else "is not text"
        if problem:
            raise InviteError(f"the invite holds a bad address {str(address)[:80]!r}: {problem}")
    key = body.get("k")
    if key is not None:
        try:
            parse_swarm_key(key if isinstance(key, str) else "")
        except SwarmKeyError as exc:
            raise InviteError(f"the invite's swarm key is not usable ({exc})") from None
    return Invite(swarm, transport, tuple(addresses), key)


def invite_addresses(own: Sequence[str], bootstrap: Sequence[str]) -> list[str]:
    """The addresses to invite with: the node's own, loopback last (an invite may be used on the
    same machine), or its bootstrap peers' when it has none (a node behind NAT: its relays)."""
    mine = sorted(own, key=lambda a: a.startswith(("/ip4/127.", "/ip6/::1/")))
    return list(mine or bootstrap)[:MAX_ADDRESSES]


def apply_invite(loaded: LoadedConfig) -> NodeConfig:
    """The config with its ``join`` invite applied: the invite's addresses before the bootstrap
    entries, its swarm, transport and swarm key. ConfigError (exit 2) for a malformed
    ``swarm_key``, a bad invite, or one for another swarm, transport or key than the config sets."""
    check_swarm_key(loaded)
    cfg = loaded.config
    if not cfg.join:
        return cfg
    try:
        invite = decode_invite(cfg.join)
    except InviteError as exc:
        raise ConfigError("join", str(exc), loaded.sources.get("join")) from None
    for key, value in (("swarm", invite.swarm), ("transport", invite.transport)):
        if loaded.sources.get(key, "default") != "default" and getattr(cfg, key) != value:
            raise ConfigError(key, f"set to {getattr(cfg, key)!r}, but the invite given with join is for "
                                   f"{value!r}; drop one of them", loaded.sources[key])
    if cfg.swarm_key and invite.swarm_key and parse_swarm_key(cfg.swarm_key) != parse_swarm_key(invite.swarm_key):
        raise ConfigError("swarm_key", "set, but the invite given with join carries another swarm key; drop one "
                                       "of them", loaded.sources.get("swarm_key"))
    bootstrap = list(dict.fromkeys([*invite.addresses, *cfg.bootstrap]))
    return dataclasses.replace(cfg, swarm=invite.swarm, transport=invite.transport, bootstrap=bootstrap,
                               swarm_key=invite.swarm_key or cfg.swarm_key)
