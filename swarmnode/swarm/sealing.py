"""Private swarms: the swarm key, the keys derived from it, and sealing with them (no I/O).

A swarm key is 32 random bytes, written ``snk1.<data>``: ``snk`` and the format's version, a
dot, then URL-safe base64 (no padding) of the 32 bytes and the first 4 bytes of their
SHA-256, so a changed character is caught (``swarmnode swarm-key`` prints a new one; config
key ``swarm_key``, or an invite that carries one).

A :class:`Sealer` holds the keys one private swarm derives from it with HKDF-SHA256, one per
purpose, info ``b"swarmnode/<purpose>/v1\\0" + swarm name``:

* :data:`BUNDLE`: a bundle's bytes wherever they travel (DHT records, pulls, holds);
* :data:`ANNOUNCE`: announcements (DHT announcement records; libp2p pushes, samples, named asks);
* :data:`NAMES`: :meth:`Sealer.name`, the HMAC-SHA256 of a public name (DHT record keys), so
  that an outsider cannot even find the swarm's records;
* :data:`LAN`: the swarm's name in the LAN advertisement, keyed the same way.

A sealed message is ``0x01`` (the seal's version), a random 96-bit nonce, then the
AES-256-GCM ciphertext and its 16-byte tag, with associated data
``b"swarmnode/<purpose>/v1\\0" + swarm name + b"\\0" + context``: a message sealed for one
purpose, swarm or context does not open as another. What is sealed is what the public swarm
sends (signed bundles and announcements: a member still verifies who wrote them).

:meth:`Sealer.open` checks the size before any decryption and raises :class:`SealRefused`
with reason ``too_large``, or ``wrong_key`` for anything that does not open (another key,
none, tampered, cut short, another purpose). It never raises another error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from swarmnode.config import ConfigError, LoadedConfig, NodeConfig

KEY_VERSION = 1
KEY_PREFIX = f"snk{KEY_VERSION}."
KEY_BYTES = 32
_CHECK = 4
SEAL_VERSION = b"\x01"
NONCE_BYTES = 12
TAG_BYTES = 16
OVERHEAD = len(SEAL_VERSION) + NONCE_BYTES + TAG_BYTES

BUNDLE = "bundle"
ANNOUNCE = "announce"
NAMES = "names"
LAN = "lan"
PURPOSES = (BUNDLE, ANNOUNCE, NAMES, LAN)


class SwarmKeyError(ValueError):
    """Not a usable swarm key; ``str()`` says what is wrong and what to do."""


class SealRefused(Exception):
    """A sealed message that is refused; ``reason`` is ``too_large`` or ``wrong_key``."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def new_swarm_key() -> str:
    """A new swarm key in its text form (32 bytes from the OS's random source)."""
    return format_swarm_key(os.urandom(KEY_BYTES))


def format_swarm_key(secret: bytes) -> str:
    raw = secret + hashlib.sha256(secret).digest()[:_CHECK]
    return KEY_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def parse_swarm_key(text: str) -> bytes:
    """The 32 secret bytes of a swarm key's text form; :class:`SwarmKeyError` otherwise (the
    message never repeats the key)."""
    text = text.strip()
    head, dot, data = text.partition(".")
    if not dot or not head.startswith("snk") or not head[3:].isdigit():
        raise SwarmKeyError(f"not a swarm key: it should start with '{KEY_PREFIX}' "
                            f"(copy the whole line `swarmnode swarm-key` printed)")
    if int(head[3:]) != KEY_VERSION:
        raise SwarmKeyError(f"swarm key version {head[3:]} is not one this swarmnode reads (it reads version "
                            f"{KEY_VERSION}); update swarmnode")
    try:
        raw = base64.b64decode(data + "=" * (-len(data) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise SwarmKeyError("the swarm key holds characters a key never has: copy it again") from None
    if len(raw) != KEY_BYTES + _CHECK:
        raise SwarmKeyError(f"the swarm key has {len(raw)} bytes, not {KEY_BYTES + _CHECK}: copy the whole line")
    secret, check = raw[:KEY_BYTES], raw[KEY_BYTES:]
    if hashlib.sha256(secret).digest()[:_CHECK] != check:
        raise SwarmKeyError("the swarm key's checksum does not match: it was mistyped; copy it again")
    return secret


def check_swarm_key(loaded: LoadedConfig) -> None:
    """ConfigError (exit 2) naming ``swarm_key`` when the config's key is malformed."""
    config_sealer(loaded.config, loaded.sources.get("swarm_key"))


def config_sealer(cfg: NodeConfig, source: str | None = None) -> Sealer | None:
    """The sealer of the config's swarm and ``swarm_key`` (None: a public swarm); ConfigError
    naming ``swarm_key`` (from ``source``) when the key is malformed."""
    try:
        return sealer_for(cfg.swarm, cfg.swarm_key)
    except SwarmKeyError as exc:
        raise ConfigError("swarm_key", str(exc), source) from None


def _info(purpose: str, swarm: str) -> bytes:
    return f"swarmnode/{purpose}/v1\0".encode() + swarm.encode("utf-8")


@dataclass(frozen=True)
class Sealer:
    """The keys of private swarm ``swarm`` (one per purpose), and sealing with them.

    Plain data (pickles to a DHT process); its repr shows no key."""

    swarm: str
    keys: dict[str, bytes] = field(repr=False)

    @classmethod
    def for_swarm(cls, swarm: str, secret: bytes) -> Sealer:
        if len(secret) != KEY_BYTES:
            raise SwarmKeyError(f"a swarm key has {KEY_BYTES} bytes, not {len(secret)}")
        keys = {p: HKDF(hashes.SHA256(), KEY_BYTES, None, _info(p, swarm)).derive(secret) for p in PURPOSES}
        return cls(swarm, keys)

    def _aad(self, purpose: str, context: bytes) -> bytes:
        return _info(purpose, self.swarm) + b"\0" + context

    def seal(self, purpose: str, plain: bytes, context: bytes = b"") -> bytes:
        """``plain`` sealed for ``purpose`` (and ``context``): :data:`OVERHEAD` bytes longer."""
        nonce = os.urandom(NONCE_BYTES)
        return SEAL_VERSION + nonce + AESGCM(self.keys[purpose]).encrypt(nonce, plain, self._aad(purpose, context))

    def open(self, purpose: str, sealed: bytes, max_plain: int, context: bytes = b"") -> bytes:
        """What ``sealed`` holds, at most ``max_plain`` bytes; :class:`SealRefused` otherwise
        (``too_large`` checked before decrypting, else ``wrong_key``)."""
        if len(sealed) > max_plain + OVERHEAD:
            raise SealRefused("too_large")
        if len(sealed) < OVERHEAD or sealed[:1] != SEAL_VERSION:
            raise SealRefused("wrong_key")
        nonce = sealed[1:1 + NONCE_BYTES]
        try:
            return AESGCM(self.keys[purpose]).decrypt(nonce, sealed[1 + NONCE_BYTES:], self._aad(purpose, context))
        except InvalidTag:
            raise SealRefused("wrong_key") from None

    def name(self, public: str, purpose: str = NAMES) -> str:
        """The keyed form of ``public`` (a record key, the swarm's name): ``p`` and 32 hex
        digits of its HMAC-SHA256 under ``purpose``'s key, the same at every member."""
        return "p" + hmac.new(self.keys[purpose], public.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


def lan_name(cfg: NodeConfig) -> str:
    """The swarm's name in the LAN advertisement: its keyed name (:data:`LAN`) when private, so
    only members recognise one of theirs. ConfigError for a malformed key."""
    sealer = config_sealer(cfg)
    return sealer.name(cfg.swarm, LAN) if sealer is not None else cfg.swarm


def sealer_for(swarm: str, swarm_key: str | None) -> Sealer | None:
    """The sealer of ``swarm`` under the text ``swarm_key``, None for a public swarm (no key);
    :class:`SwarmKeyError` for a malformed key."""
    return Sealer.for_swarm(swarm, parse_swarm_key(swarm_key)) if swarm_key else None
