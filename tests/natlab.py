"""A small Internet with two home routers, built from Linux network namespaces (root only).

::

    home1 (192.168.1.2) -- r1 [masquerade] 10.77.1.2 --\\
                                                        public (10.77.1.1, 10.77.2.1)
    home2 (192.168.1.2) -- r2 [masquerade] 10.77.2.2 --/

Both homes use the same private subnet, as real home networks do; each router masquerades
its home's outgoing connections and forwards nothing inbound that its home did not start
(no port forwarding), so nothing in ``public`` can open a connection to a home. Every
address lives in namespaces this module creates; nothing is routed to or from the host's own
namespace. :meth:`NatLab.remove` deletes the namespaces (and so every veth and rule in them).

:class:`SwitchLab` is a flat LAN instead: N namespaces, one address each, all on one Linux
bridge that lives in a "switch" namespace of its own, so that each namespace's interface
counters are one node's traffic (``benchmarks/swarm_scale.py``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import TypeVar

from programs import argv

PUBLIC_IP = "10.77.1.1"
HOME_IP = "192.168.1.2"

_ROUTER_RULES = """
table ip nat {{
  chain postrouting {{ type nat hook postrouting priority 100; oifname "{wan}" masquerade; }}
}}
table inet filter {{
  chain forward {{
    type filter hook forward priority 0; policy drop;
    ct state established,related accept
    iifname "{lan}" oifname "{wan}" accept
  }}
  chain input {{
    type filter hook input priority 0; policy accept;
    iifname "{wan}" ct state new drop
  }}
}}
"""


class LabUnavailable(RuntimeError):
    """Namespaces cannot be built here; ``str()`` says why (for pytest.skip)."""


def _run(*cmd: str, stdin: str | None = None) -> None:
    result = subprocess.run(list(cmd), input=stdin, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {result.stderr.strip()}")


def netns_exec(namespace: str) -> list[str]:
    """The command prefix that runs a command inside ``namespace``."""
    return ["ip", "netns", "exec", namespace]


_Lab = TypeVar("_Lab", bound="_Namespaces")


class _Namespaces:
    """What the labs share: creating namespaces, veth pairs between them, and removing them all.

    A subclass lists the tools it needs in ``TOOLS`` and builds its network in ``_build``."""

    TOOLS: tuple[str, ...] = ("ip",)

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self._created: list[str] = []

    @classmethod
    def check(cls) -> None:
        """Raise LabUnavailable unless root with the ``TOOLS`` can build the lab."""
        if os.geteuid() != 0:
            raise LabUnavailable("network namespaces need root (CI runs as root)")
        for tool in cls.TOOLS:
            if shutil.which(tool) is None:
                raise LabUnavailable(f"`{tool}` not found (Debian: apt-get install iproute2 nftables)")

    def build(self: _Lab) -> _Lab:
        """Build the network; LabUnavailable (saying why) where this machine cannot. Call
        :meth:`remove` afterwards either way: a half-built lab is removed the same way."""
        self.check()
        try:
            self._build()
        except RuntimeError as exc:
            raise LabUnavailable(f"the kernel refused part of the namespace network: {exc}") from None
        return self

    def _build(self) -> None:
        raise NotImplementedError

    def _add_namespace(self, ns: str) -> None:
        _run("ip", "netns", "add", ns)
        self._created.append(ns)
        self._in(ns, "ip", "link", "set", "lo", "up")

    def _in(self, ns: str, *cmd: str, stdin: str | None = None) -> None:
        _run(*netns_exec(ns), *cmd, stdin=stdin)

    def _route_multicast(self, ns: str, iface: str) -> None:
        """Route 224.0.0.0/4 out of ``iface``, as a DHCP-configured host's default route would
        (mDNS needs it; a namespace has no route at all otherwise)."""
        self._in(ns, "ip", "route", "add", "224.0.0.0/4", "dev", iface)

    def _link(self, ns_a: str, if_a: str, ip_a: str | None, ns_b: str, if_b: str, ip_b: str | None,
              prefix_len: int = 24) -> None:
        """A veth pair between two namespaces, an address at each end that has one (None: none)."""
        _run("ip", "link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b, "netns", ns_b)
        for ns, iface, ip in ((ns_a, if_a, ip_a), (ns_b, if_b, ip_b)):
            if ip is not None:
                self._in(ns, "ip", "addr", "add", f"{ip}/{prefix_len}", "dev", iface)
            self._in(ns, "ip", "link", "set", iface, "up")

    def can_connect(self, from_ns: str, ip: str, port: int) -> bool:
        """Whether a TCP connection from ``from_ns`` to ``ip:port`` opens (2 s limit)."""
        return subprocess.run([*netns_exec(from_ns), *argv("tcp_probe", ip, port)], timeout=20).returncode == 0

    def remove(self) -> None:
        for ns in reversed(self._created):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)
        self._created.clear()


@contextlib.contextmanager
def built_or_skip(lab: _Lab) -> Iterator[_Lab]:
    """``lab`` built, or the test skipped saying why it cannot be here; removed on leaving either way."""
    import pytest

    try:
        try:
            lab.build()
        except LabUnavailable as exc:
            pytest.skip(str(exc))
        yield lab
    finally:
        lab.remove()


class NatLab(_Namespaces):
    """Create with :meth:`build`; always :meth:`remove` (the test's fixture does, even on failure)."""

    TOOLS = ("ip", "nft")

    def __init__(self, multicast: bool = False) -> None:
        """``multicast``: route multicast out of each home's interface (for mDNS, which no
        router passes on)."""
        super().__init__()
        self.multicast = multicast
        tag = self.tag
        self.public, self.r1, self.r2, self.home1, self.home2 = (f"sn{tag}-{n}" for n in
                                                                  ("pub", "r1", "r2", "h1", "h2"))
        self.namespaces = [self.public, self.r1, self.r2, self.home1, self.home2]

    def exec_prefix(self, namespace: str) -> list[str]:
        return netns_exec(namespace)

    def _build(self) -> None:
        for ns in self.namespaces:
            self._add_namespace(ns)
        t = self.tag
        self._link(self.public, f"sn{t}p1", PUBLIC_IP, self.r1, f"sn{t}w1", "10.77.1.2")
        self._link(self.public, f"sn{t}p2", "10.77.2.1", self.r2, f"sn{t}w2", "10.77.2.2")
        for router, wan, gateway, home, lan, hlan in ((self.r1, f"sn{t}w1", PUBLIC_IP, self.home1, f"sn{t}l1",
                                                       f"sn{t}h1"),
                                                      (self.r2, f"sn{t}w2", "10.77.2.1", self.home2, f"sn{t}l2",
                                                       f"sn{t}h2")):
            self._link(router, lan, "192.168.1.1", home, hlan, HOME_IP)
            self._in(router, "ip", "route", "add", "default", "via", gateway)
            self._in(router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            self._in(router, "nft", "-f", "-", stdin=_ROUTER_RULES.format(wan=wan, lan=lan))
            self._in(home, "ip", "route", "add", "default", "via", "192.168.1.1")
            if self.multicast:
                self._route_multicast(home, hlan)


class SwitchLab(_Namespaces):
    """``n`` node namespaces on one bridge: node ``i`` is alone in its namespace with
    :meth:`address` ``(i)`` on a veth whose other end is a port of the bridge in ``switch``.

    Nothing is routed to or from the host's namespace, and only the node's own traffic crosses
    its veth, so the counters in ``/proc/<pid of a process in it>/net/dev`` are that node's
    bytes. Create with :meth:`build`; always :meth:`remove`, even after a failed build."""

    SUBNET = "10.78"  # /16: addresses 10.78.0.1 to 10.78.255.250

    def __init__(self, n: int, multicast: bool = False) -> None:
        """``multicast``: route multicast out of each node's interface (for mDNS)."""
        super().__init__()
        self.multicast = multicast
        if not 0 < n <= 250 * 256:
            raise ValueError(f"a SwitchLab holds 1 to {250 * 256} nodes, not {n}")
        self.n = n
        self.switch = f"sn{self.tag}-sw"
        self.namespaces = [f"sn{self.tag}-{i}" for i in range(n)]

    def address(self, i: int) -> str:
        return f"{self.SUBNET}.{i // 250}.{i % 250 + 1}"

    def exec_prefix(self, i: int) -> list[str]:
        """The command prefix that runs a command in node ``i``'s namespace."""
        return netns_exec(self.namespaces[i])

    def _build(self) -> None:
        self._add_namespace(self.switch)
        self._in(self.switch, "ip", "link", "add", "br0", "type", "bridge")
        self._in(self.switch, "ip", "link", "set", "br0", "up")
        for i, ns in enumerate(self.namespaces):
            self._add_namespace(ns)
            port = f"sn{self.tag}s{i}"  # interface names: 15 characters at most
            self._link(self.switch, port, None, ns, f"sn{self.tag}n{i}", self.address(i), prefix_len=16)
            self._in(self.switch, "ip", "link", "set", port, "master", "br0")
            if self.multicast:
                self._route_multicast(ns, f"sn{self.tag}n{i}")
