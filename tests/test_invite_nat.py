"""A second LAN behind a NAT joins the first through an invite and a relay (root only; see
tests/natlab.py for the network, with multicast inside each home for mDNS).

``swarmnode relay`` runs in ``public``. Home 1 is the first LAN: behind its router a node
(``swarmnode start``) and a transport node beside it joined through the relay's bootstrap
address. ``swarmnode invite``, run in home 1 against that node's home as a user would, prints a
code that must carry the relay's address (a node behind NAT invites through its relays). In
home 2, behind the other router, ``swarmnode start --join CODE`` (the joiner) starts with no
bootstrap list, and a transport node ``second`` with no bootstrap list, no invite and the
default ``reachability = "auto"``, only LAN discovery. The joiner advertises on its LAN the way
in it was given (the relay); ``second`` takes it as its bootstrap list and, since the joiner is
behind NAT, goes private (see swarmnode/swarm/lanrecord.py). Bundles must cross both ways
between ``second`` and home 1, and between the joiner and home 1, over each transport; printed:
the seconds from home 2's first start to the first bundle across each way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from natlab import HOME_IP, PUBLIC_IP, NatLab, built_or_skip
from nodeproc import cli, cli_json, start_argv, write_signal_tasks
from swarmnode.swarm.invite import decode_invite
from test_nat import start_relay
from transport_node import SWARM, ProcNode
from waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
DAEMON_PORT, NODE_PORT = 4101, 4102  # in each home: reachable inside it only


@pytest.fixture
def lab():
    with built_or_skip(NatLab(multicast=True)) as built:
        yield built


def _daemon(prefix: list[str], home: Path, model: Path, tasks: Path, *flags: str) -> subprocess.Popen:
    """``swarmnode start`` behind a home's router. ``--reachability private``: the lab's "public"
    addresses are in 10/8, which ``auto`` takes for a LAN swarm's."""
    argv = start_argv(home, model, "--tasks", str(tasks), "--listen", f"/ip4/0.0.0.0/tcp/{DAEMON_PORT}",
                      "--reachability", "private", *flags)
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([*prefix, *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=open(home / "stderr.txt", "w"), start_new_session=True)


def _invite(prefix: list[str], home: Path) -> str | None:
    """``swarmnode invite`` against ``home``'s node: its code, or None while it has none to give."""
    out = cli(home, "invite", prefix=prefix)
    return out.stdout.strip() if out.returncode == 0 else None


def _log_tail(home: Path) -> str:
    path = home / "logs" / "swarmnode.log"
    lines = path.read_text().splitlines() if path.exists() else (home / "stderr.txt").read_text().splitlines()
    return f"--- {home.name}\n" + "\n".join(line for line in lines if "swarmnode: round " not in line)[-3000:]


@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_a_second_home_joins_through_an_invite_and_a_relay(lab, transport, tiny_model_dir, tmp_path):
    tasks = write_signal_tasks(tmp_path / "tasks.toml")
    homes = {name: tmp_path / name for name in ("d1", "d2")}
    relay, daemons, nodes = None, [], []
    try:
        relay, address = start_relay(lab.exec_prefix(lab.public), transport, tmp_path / "relay",
                                     f"/ip4/{PUBLIC_IP}/tcp/0", tmp_path / "relay.err")
        h1, h2 = lab.exec_prefix(lab.home1), lab.exec_prefix(lab.home2)
        daemons.append(_daemon(h1, homes["d1"], tiny_model_dir, tasks, "--transport", transport, "--swarm", SWARM,
                               "--bootstrap", address))
        first = ProcNode(transport, 1, bootstrap=[address], listen=f"/ip4/0.0.0.0/tcp/{NODE_PORT}", private=True,
                         stderr_path=tmp_path / "first.err", prefix=h1)
        nodes.append(first)
        first.ready(90)
        code = wait_until(lambda: _invite(h1, homes["d1"]), 90, "`swarmnode invite` in home 1 to print a code",
                          interval=1.0, procs=daemons, context=lambda: _log_tail(homes["d1"]))
        invite = decode_invite(code)
        # Behind NAT the node has no address of its own to give: the code carries its relay's.
        assert (invite.swarm, invite.transport, list(invite.addresses)) == (SWARM, transport, [address]), invite

        t_home2 = time.monotonic()
        # --lan: tests/conftest.py turns discovery off for the nodes tests start outside namespaces.
        daemons.append(_daemon(h2, homes["d2"], tiny_model_dir, tasks, "--join", code, "--lan"))
        second = ProcNode(transport, 2, listen=f"/ip4/{HOME_IP}/tcp/{NODE_PORT}", lan=True, auto=True,
                          stderr_path=tmp_path / "second.err", prefix=h2)
        nodes.append(second)
        second.ready(90)
        d1_id = cli_json(homes["d1"], "status", prefix=h1)["peer_id"]
        d2_id = wait_until(lambda: (cli_json(homes["d2"], "status", prefix=h2) or {}).get("peer_id"), 90,
                           "the joiner's API", interval=1.0, procs=daemons, context=lambda: _log_tail(homes["d2"]))
        home1 = {d1_id, first.peer_id}
        crossed: dict[str, float] = {}
        round_no = 0

        def accepted_by(home: str, prefix: list[str]) -> set[str]:
            """The peers whose bundles a daemon accepted, as `swarmnode peers` shows a user."""
            return {p["peer_id"] for p in cli_json(homes[home], "peers", prefix=prefix) or [] if p["accepted"]}

        def arrived() -> dict[str, set[str]]:
            """Whose bundles reached whom: home 1's nodes' at ``second`` and at the joiner, theirs
            at a node of home 1 (the transport node, or the daemon: `swarmnode peers` is asked only
            while the joiner's have reached neither)."""
            at_home1 = {m["sender"] for m in first.messages()}
            if "the joiner -> home 1" not in crossed and d2_id not in at_home1:
                at_home1 |= accepted_by("d1", h1)
            return {"home 1 -> second": home1 & {m["sender"] for m in second.messages()},
                    "second -> home 1": {second.peer_id} & at_home1,
                    "home 1 -> the joiner": home1 & accepted_by("d2", h2),
                    "the joiner -> home 1": {d2_id} & at_home1}

        def both_ways() -> bool:
            nonlocal round_no
            round_no += 1
            for n in nodes:  # every poll: a bundle published before its node joined may reach no one
                n.send(cmd="publish", round=round_no, size=2000)
            for label, senders in arrived().items():
                if senders and label not in crossed:
                    crossed[label] = time.monotonic() - t_home2
            return len(crossed) == 4

        def context() -> str:
            return "\n".join([_log_tail(h) for h in homes.values()]
                             + [f"{n.stderr_path.name}: {n.stderr_path.read_text()[-1500:]}" for n in nodes]
                             + [f"arrived: {arrived()}; home 1 {home1}, joiner {d2_id}, second {second.peer_id}",
                                f"the joiner's peers: {cli_json(homes['d2'], 'peers', prefix=h2)}"])

        wait_until(both_ways, 90, "bundles both ways between home 1 and each node of home 2", interval=1.0,
                   procs=daemons + [relay], context=context)
        print(f"\n{transport}: seconds from home 2's start to the first bundle across "
              f"{min(crossed.values()):.1f} ({', '.join(f'{k} {v:.1f}' for k, v in sorted(crossed.items()))})")
        # It reached the swarm through the way in its LAN neighbour advertised, as its counters say.
        assert second.lan()["counts"]["lan_way_in_taken"] == 1, context()
    finally:
        for n in nodes:
            n.kill()
        for p in [*daemons, relay]:
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
