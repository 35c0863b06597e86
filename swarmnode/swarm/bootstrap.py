"""Which peers a node dials to join its swarm.

Sources, all multiaddrs ending in ``/p2p/<PeerID>``:

* ``--bootstrap MULTIADDR`` (repeatable; config key ``bootstrap``, a list),
* ``--bootstrap-file PATH`` (config key ``bootstrap_file``): one multiaddr a line, ``#``
  starts a comment, blank lines are ignored,
* when neither is set, the list shipped in the package (``swarmnode/data/bootstrap.txt``),
  which may be empty: the node then trains alone until a peer dials it.

Both configured sources are used together when both are given. A malformed entry is a
:class:`~swarmnode.config.ConfigError` naming the source and line (exit status 2), never a
peer silently skipped.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from swarmnode.config import ConfigError, NodeConfig
from swarmnode.swarm.address import HOST_PROTOCOLS, MultiaddrError, parse_multiaddr

PACKAGED_FILE = "bootstrap.txt"

_FIRST_PROTOCOLS = (*HOST_PROTOCOLS, "dnsaddr")
_BASE58 = re.compile(r"^[1-9A-HJ-NP-Za-km-z]{32,128}$")
_EXAMPLE = "/ip4/203.0.113.7/tcp/31337/p2p/12D3KooW..."


def multiaddr_problem(addr: str) -> str | None:
    """Why ``addr`` cannot be a bootstrap peer, or None if it looks dialable: a host (or a
    /dnsaddr), then a port unless /dnsaddr, and last the peer's /p2p/<PeerID>."""
    try:
        parts = parse_multiaddr(addr).parts
    except MultiaddrError as exc:
        return str(exc)
    first = parts[0][0]
    if first not in _FIRST_PROTOCOLS:
        return f"starts with /{first}; expected one of " + ", ".join("/" + p for p in _FIRST_PROTOCOLS)
    last, peer_id = parts[-1]
    if last not in ("p2p", "ipfs") or not _BASE58.match(peer_id or ""):
        return "does not end in /p2p/<PeerID> (the peer's identity is needed to dial it securely)"
    if first != "dnsaddr":
        if len(parts) < 3 or parts[1][0] not in ("tcp", "udp"):
            return "has no /tcp/<port> (or /udp/<port>) after the host"
        if int(parts[1][1] or 0) == 0:  # the parser admits 0, a listen address's "any port"
            return f"port {parts[1][1]!r} is not in 1-65535"
    return None


def parse_bootstrap_text(text: str, source: str) -> list[str]:
    """The multiaddrs of a bootstrap file's text; ConfigError naming ``source``:line for a bad one."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        addr = line.split("#", 1)[0].strip()
        if not addr:
            continue
        problem = multiaddr_problem(addr)
        if problem:
            raise ConfigError("bootstrap_file", f"{source}:{number}: {addr!r:.120} {problem} "
                                                f"(expected like {_EXAMPLE})")
        out.append(addr)
    return out


def packaged_bootstrap() -> list[str]:
    """The list shipped in the package (possibly empty)."""
    shipped = resources.files("swarmnode.data") / PACKAGED_FILE
    if not shipped.is_file():
        return []
    return parse_bootstrap_text(shipped.read_text(encoding="utf-8"), f"<package>/{PACKAGED_FILE}")


def resolve_bootstrap(cfg: NodeConfig) -> list[str]:
    """The multiaddrs this node dials, in order, without duplicates (see module doc)."""
    out: list[str] = []
    for addr in cfg.bootstrap:
        problem = multiaddr_problem(addr.strip())
        if problem:
            raise ConfigError("bootstrap", f"{addr!r:.120} {problem} (expected like {_EXAMPLE})")
        out.append(addr.strip())
    if cfg.bootstrap_file:
        path = Path(cfg.bootstrap_file).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError("bootstrap_file", f"cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ConfigError("bootstrap_file", f"{path} is not UTF-8 text") from None
        out.extend(parse_bootstrap_text(text, str(path)))
    if not cfg.bootstrap and not cfg.bootstrap_file:
        out.extend(packaged_bootstrap())
    return list(dict.fromkeys(out))
