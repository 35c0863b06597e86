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
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

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


class NatLab:
    """Create with :meth:`build`; always :meth:`remove` (the test's fixture does, even on failure)."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.tag = tag
        self.public, self.r1, self.r2, self.home1, self.home2 = (f"sn{tag}-{n}" for n in
                                                                  ("pub", "r1", "r2", "h1", "h2"))
        self.namespaces = [self.public, self.r1, self.r2, self.home1, self.home2]
        self._created: list[str] = []

    @staticmethod
    def check() -> None:
        """Raise LabUnavailable unless root with `ip` and `nft` can build the lab."""
        if os.geteuid() != 0:
            raise LabUnavailable("network namespaces need root (CI runs as root)")
        for tool in ("ip", "nft"):
            if shutil.which(tool) is None:
                raise LabUnavailable(f"`{tool}` not found (Debian: apt-get install iproute2 nftables)")

    def exec_prefix(self, namespace: str) -> list[str]:
        return ["ip", "netns", "exec", namespace]

    def build(self) -> "NatLab":
        """Build the network; LabUnavailable (saying why) where this machine cannot. Call
        :meth:`remove` afterwards either way: a half-built lab is removed the same way."""
        self.check()
        try:
            self._build()
        except RuntimeError as exc:
            raise LabUnavailable(f"the kernel refused part of the namespace network: {exc}") from None
        return self

    def _build(self) -> None:
        for ns in self.namespaces:
            _run("ip", "netns", "add", ns)
            self._created.append(ns)
            self._in(ns, "ip", "link", "set", "lo", "up")
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

    def _in(self, ns: str, *cmd: str, stdin: str | None = None) -> None:
        _run(*self.exec_prefix(ns), *cmd, stdin=stdin)

    def _link(self, ns_a: str, if_a: str, ip_a: str, ns_b: str, if_b: str, ip_b: str) -> None:
        """A veth pair between two namespaces, one /24 address at each end."""
        _run("ip", "link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b, "netns", ns_b)
        for ns, iface, ip in ((ns_a, if_a, ip_a), (ns_b, if_b, ip_b)):
            self._in(ns, "ip", "addr", "add", f"{ip}/24", "dev", iface)
            self._in(ns, "ip", "link", "set", iface, "up")

    def can_connect(self, from_ns: str, ip: str, port: int) -> bool:
        """Whether a TCP connection from ``from_ns`` to ``ip:port`` opens (2 s limit)."""
        probe = ("import socket,sys\ns=socket.socket();s.settimeout(2)\n"
                 f"sys.exit(0 if s.connect_ex(({ip!r},{port}))==0 else 1)")
        return subprocess.run([*self.exec_prefix(from_ns), sys.executable, "-c", probe], timeout=20).returncode == 0

    def remove(self) -> None:
        for ns in reversed(self._created):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)
        self._created.clear()
