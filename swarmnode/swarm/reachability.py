"""Whether other peers can dial this node, decided once before its transport starts.

A node behind a home router without port forwarding accepts no inbound connection. If it
advertised its addresses anyway (its LAN address, or a listen address the router never
forwards), peers would put it in their DHT routing tables, try to store records on it and
pass its address on, and every such dial would hang until a timeout. So a node that is not
reachable (``private``) only dials out: on hivemind it is a DHT *client* (it reads and stores
records at public DHT servers, and no routing table lists it); on libp2p it advertises no
address, and the public peers it dialed pass on its announcements and hold its bundles.

``auto`` decides from what the node knows without asking anyone: a node is private when it
has no ``announce`` address, every IPv4 address of its own is in a private range (RFC 1918,
carrier-grade NAT 100.64/10, link-local), and at least one bootstrap peer has a public
address, which is the situation of a desktop behind NAT joining an Internet swarm. A LAN
or single-machine swarm (bootstrap peers on private or loopback addresses) stays public, and
so does a node with no bootstrap peer: it is the one others join through, unless its LAN says
otherwise. A node with no bootstrap peer that finds, on its local network, a node of its swarm
advertising a way in (its bootstrap peers) joins through it, and decides again
(:func:`follow_lan`): private when that neighbour is behind NAT (they share its router), or
when the way in makes ``auto`` say so; the transport then restarts as a private one. That
decision can come only after the transport started (the neighbour may start later), so it is
made there, once (:class:`~swarmnode.swarm.transport.base.Transport`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from swarmnode.swarm.address import ip4_of
from swarmnode.swarm.transport.base import FollowLan, local_ipv4_addresses

CHOICES = ("auto", "public", "private")


def is_public_ip(text: str) -> bool:
    """True for a globally routable IPv4/IPv6 address; False for private, loopback, link-local, CGNAT or junk."""
    try:
        return ipaddress.ip_address(text).is_global
    except ValueError:
        return False


def is_private(setting: str, *, announce: str | None, bootstrap: Sequence[str], listen: str | None,
               local_addresses: Sequence[str] | None = None) -> bool:
    """Resolve ``reachability`` (one of :data:`CHOICES`) to private (True) or public (False).

    ``local_addresses`` defaults to this host's IPv4 addresses; ``listen`` narrows them when it
    names one address. ValueError for an unknown setting.
    """
    if setting not in CHOICES:
        raise ValueError(f"reachability must be one of {', '.join(CHOICES)}, not {setting!r}")
    if setting != "auto":
        return setting == "private"
    if announce or not bootstrap:
        return False
    listen_ip = ip4_of(listen or "")
    own = [listen_ip] if listen_ip and listen_ip != "0.0.0.0" else list(
        local_addresses if local_addresses is not None else local_ipv4_addresses())
    own = [a for a in own if not a.startswith("127.")]
    if not own or any(is_public_ip(a) for a in own):
        return False
    return any(is_public_ip(ip) for ip in (ip4_of(b) for b in bootstrap) if ip)


def follow_lan(setting: str, *, announce: str | None, bootstrap: Sequence[str], listen: str | None,
               local_addresses: Sequence[str] | None = None) -> FollowLan | None:
    """For a node that may take a LAN neighbour's way in (``auto``, no ``announce``, no
    bootstrap peer of its own): the rule that decides, given that way in and whether the
    neighbour is behind NAT, whether this node is private; None for any other node, whose
    reachability :func:`is_private` decided for good."""
    if setting != "auto" or announce or bootstrap:
        return None

    def private(way_in: Sequence[str], neighbour_behind_nat: bool) -> bool:
        return neighbour_behind_nat or is_private("auto", announce=None, bootstrap=way_in, listen=listen,
                                                  local_addresses=local_addresses)
    return private
