"""Multiaddrs as text: the one parser for every place that reads a peer's or a listen address.

A multiaddr is a path of protocols, each followed by its value unless it takes none:
``/ip4/203.0.113.7/tcp/31337/p2p/12D3KooW...``. :func:`parse_multiaddr` checks the shape (a
value where one is due, a port in range, a dotted IPv4 address) and names the parts the
node uses: the host, the TCP or UDP port, the PeerID. What an address must hold depends on
its use (a bootstrap peer needs a PeerID, a listen address a host), so each caller checks
that on the parsed form. It imports no network stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Protocols that take no value (``/quic-v1``, ``/ws``); every other one is followed by one.
VALUELESS = frozenset({"quic", "quic-v1", "ws", "wss", "tls", "noise", "http", "https", "p2p-circuit",
                       "webtransport", "webrtc", "webrtc-direct"})
HOST_PROTOCOLS = ("ip4", "ip6", "dns", "dns4", "dns6")
_PORT_PROTOCOLS = ("tcp", "udp")
_IP4 = re.compile(r"^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$")


class MultiaddrError(ValueError):
    """Not a usable multiaddr; ``str()`` is the problem alone, for the caller to put beside
    the address (``port '70000' is not in 1-65535``)."""


@dataclass(frozen=True)
class Multiaddr:
    """A parsed multiaddr: its (protocol, value) parts in order, value None for a valueless one."""

    text: str
    parts: tuple[tuple[str, str | None], ...]

    def value(self, *protocols: str) -> str | None:
        """The value of the first part of any of ``protocols``, or None."""
        return next((v for p, v in self.parts if p in protocols), None)

    @property
    def host(self) -> str | None:
        """The value of the first /ip4, /ip6 or /dns* part."""
        return self.value(*HOST_PROTOCOLS)

    @property
    def tcp_port(self) -> int | None:
        port = self.value("tcp")
        return None if port is None else int(port)

    @property
    def peer_id(self) -> str | None:
        """The PeerID of the last /p2p/ (or legacy /ipfs/) part: the peer the address reaches."""
        return next((v for p, v in reversed(self.parts) if p in ("p2p", "ipfs")), None)


def parse_multiaddr(text: str) -> Multiaddr:
    """``text`` (surrounding blanks ignored) parsed; :class:`MultiaddrError` when it is not
    a multiaddr, a protocol lacks its value, a /tcp or /udp port is not a number in 0-65535
    (0: any free port, for a listen address) or an /ip4 value is not a dotted IPv4 address."""
    stripped = text.strip()
    names = stripped.split("/")
    if len(names) < 3 or names[0] != "":
        raise MultiaddrError("not a multiaddr")
    parts: list[tuple[str, str | None]] = []
    i, names = 0, names[1:]
    while i < len(names):
        proto = names[i]
        if proto in VALUELESS:
            parts.append((proto, None))
            i += 1
            continue
        if not proto or i + 1 >= len(names) or not names[i + 1]:
            raise MultiaddrError(f"/{proto} needs a value")
        value = names[i + 1]
        if proto in _PORT_PROTOCOLS and not (value.isdigit() and int(value) <= 65535):
            raise MultiaddrError(f"port {value!r} is not in 1-65535")
        if proto == "ip4" and not _IP4.match(value):
            raise MultiaddrError(f"{value!r} is not an IPv4 address")
        parts.append((proto, value))
        i += 2
    return Multiaddr(stripped, tuple(parts))


def peer_id_of(text: str) -> str | None:
    """The PeerID a multiaddr names (see :attr:`Multiaddr.peer_id`); None if it names none or
    is no multiaddr. Never raises: it reads what peers send."""
    try:
        return parse_multiaddr(text).peer_id
    except MultiaddrError:
        return None


def ip4_of(text: str) -> str | None:
    """The IPv4 address of a multiaddr that starts with /ip4; None for any other. Never raises."""
    try:
        parts = parse_multiaddr(text).parts
    except MultiaddrError:
        return None
    return parts[0][1] if parts[0][0] == "ip4" else None
