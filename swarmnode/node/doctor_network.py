"""``swarmnode doctor``'s network checks: the API port and the listen address are free, and the
bootstrap peers answer a TCP dial (in parallel, each within a time-out)."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

from swarmnode.config import ConfigError, NodeConfig
from swarmnode.node.checks import OK, PROBLEM, WARNING, Check
from swarmnode.swarm.address import MultiaddrError, parse_multiaddr
from swarmnode.swarm.bootstrap import resolve_bootstrap

LAN_BROWSE_S = 3.0  # mDNS browsers query at once and again after 1 s
BOOTSTRAP_TIMEOUT_S = 3.0


def _host_and_port(addr: str) -> tuple[str, int | None]:
    """The host and TCP port (None without /tcp: QUIC, UDP) of a multiaddr; MultiaddrError
    when it is none or names no host."""
    parsed = parse_multiaddr(addr)
    if parsed.host is None:
        raise MultiaddrError("names no host (expected /ip4, /ip6 or /dns)")
    return parsed.host, parsed.tcp_port


def _port_free(host: str, port: int) -> str | None:
    """None if a listening socket could bind ``host:port`` now; otherwise the reason."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def check_api_port(cfg: NodeConfig) -> Check:
    if cfg.api_port == 0:
        return Check("api port", OK, "0: a free port is picked at start (written to <home>/api.json)")
    why = _port_free("127.0.0.1", cfg.api_port)
    if why:
        return Check("api port", PROBLEM, f"127.0.0.1:{cfg.api_port}: {why}",
                     "stop the program using it (another node? see its <home>/api.json), or set api_port = 0")
    return Check("api port", OK, f"127.0.0.1:{cfg.api_port} is free")


def check_listen(cfg: NodeConfig) -> Check:
    if cfg.solo:
        return Check("listen", OK, "no socket: solo")
    if not cfg.listen:
        return Check("listen", OK, "a free TCP port is picked at start")
    try:
        host, port = _host_and_port(cfg.listen)
    except MultiaddrError as exc:
        return Check("listen", PROBLEM, f"{cfg.listen!r:.120}: {exc}",
                     "set listen to a multiaddr like /ip4/0.0.0.0/tcp/31337")
    if not port:
        return Check("listen", OK, f"{cfg.listen} (port picked at start)")
    why = _port_free(host, port)
    if why:
        return Check("listen", PROBLEM, f"{cfg.listen}: {why}",
                     "stop the program using the port (another node?), or choose another port in --listen")
    return Check("listen", OK, f"{cfg.listen} is free")


def _dial(host: str, port: int, timeout: float) -> str | None:
    """None if a TCP connection to ``host:port`` opens within ``timeout``; otherwise the reason."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer in {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def check_bootstrap(cfg: NodeConfig, timeout: float = BOOTSTRAP_TIMEOUT_S) -> list[Check]:
    """One check per bootstrap peer, dialed in parallel. All unreachable is a problem, some a warning."""
    if cfg.solo:
        return [Check("bootstrap", OK, "not used: solo")]
    try:
        addrs = resolve_bootstrap(cfg)
    except ConfigError as exc:
        return [Check("bootstrap", PROBLEM, str(exc),
                      f"fix {exc.key}, or give peers with --bootstrap /ip4/HOST/tcp/PORT/p2p/ID")]
    if not addrs:
        reach = "nodes on the local network and peers that dial it" if cfg.lan else "peers that dial it"
        return [Check("bootstrap", WARNING, f"no bootstrap peers: this node can only be found by {reach}",
                      "give an invite with --join CODE (`swarmnode invite` on a node of the swarm prints one), "
                      "or a peer with --bootstrap /ip4/HOST/tcp/PORT/p2p/ID")]
    untested: dict[str, Check] = {}  # by address: those that cannot be dialled, and why
    dials: dict[str, tuple[str, int]] = {}
    for addr in addrs:
        try:
            host, port = _host_and_port(addr)
        except MultiaddrError as exc:
            untested[addr] = Check(f"bootstrap {addr}", PROBLEM, str(exc), "fix or remove this address")
            continue
        if port:
            dials[addr] = (host, port)
        else:
            untested[addr] = Check(f"bootstrap {addr}", WARNING, "not a TCP address: cannot be tested")
    with ThreadPoolExecutor(max_workers=min(16, len(addrs))) as pool:
        futures = {addr: pool.submit(_dial, host, port, timeout) for addr, (host, port) in dials.items()}
        results = {addr: f.result() for addr, f in futures.items()}
    reachable = sum(1 for why in results.values() if why is None)
    fix = ("check your internet connection and firewall (outgoing TCP), or give a reachable peer with "
           "--bootstrap; the node still trains alone meanwhile (or run with --solo)")
    out = []
    for addr in addrs:
        why = results.get(addr)
        if addr in untested:
            out.append(untested[addr])
        elif why is None:
            out.append(Check(f"bootstrap {addr}", OK, "answers"))
        else:
            out.append(Check(f"bootstrap {addr}", WARNING if reachable else PROBLEM, why, None if reachable else fix))
    return out


def check_lan(cfg: NodeConfig, seconds: float = LAN_BROWSE_S, timeout: float = BOOTSTRAP_TIMEOUT_S) -> Check:
    """Which nodes of this node's swarm and transport advertise on the local network (mDNS) and
    answer a TCP dial there. A PeerID is only proven by the handshake a node makes when it joins;
    an advertisement nobody answers (a stale or forged one) is left out and counted."""
    if cfg.solo or not cfg.lan:
        return Check("lan", OK, "not used: " + ("solo" if cfg.solo else "lan = false"))
    from swarmnode.swarm.sealing import lan_name
    from swarmnode.swarm.transport.lan import browse

    try:
        found, counts = browse(lan_name(cfg), cfg.transport, seconds)
    except OSError as exc:
        return Check("lan", WARNING, f"cannot use multicast here: {exc.strerror or exc}",
                     "join with --join CODE or --bootstrap instead (Wi-Fi client isolation, VLANs and cloud "
                     "hosts block mDNS)")
    answering = []
    if found:
        with ThreadPoolExecutor(max_workers=min(16, len(found))) as pool:
            dials = {p: pool.submit(_dial, host, port, timeout) for p, addrs in found.items()
                     for host, port in [_host_and_port(addrs[0])] if port}
            answering = [p for p, dial in dials.items() if dial.result() is None]
    ignored = sum(n for k, n in counts.items() if k.startswith("lan_refused_")) + len(found) - len(answering)
    tail = f"; {ignored} other answer(s) ignored (other swarms, transports, versions; malformed; no answer)" \
        if ignored else ""
    if not answering:
        return Check("lan", OK, f"no node of swarm '{cfg.swarm}' over {cfg.transport} answered on the local "
                                f"network in {seconds:g} s{tail}")
    return Check("lan", OK, f"{len(answering)} node(s) of swarm '{cfg.swarm}' over {cfg.transport} on the local "
                            f"network, joined without a bootstrap list: {', '.join(answering[:8])}{tail}")
