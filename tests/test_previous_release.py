"""The previous release and this one in one swarm, over each transport: bundles flow both ways,
through a bootstrap peer and between two nodes that found each other on a LAN.

Community nodes upgrade at different times, so a release must exchange with the one before
it (docs/protocol.md: messages say their version, a node reads the previous release's). The
previous release's ``swarmnode`` and ``tests`` are taken from git history (``git archive``)
into a temporary directory and run by their own ``tests/transport_node.py`` in a virtual
environment of their own that borrows this environment's third-party libraries (a ``.pth``
file: nothing is downloaded). A checkout without that history (a shallow clone) skips, and
says how to fetch it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from natlab import SwitchLab, built_or_skip  # noqa: E402
from nodeproc import free_port  # noqa: E402
from transport_node import ProcNode, identity_for  # noqa: E402
from waiting import wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# The release before this one: main as it was released, with libp2p protocol 3 (announcements
# with ``addrs``), hivemind DHT layout 2, bundle version 2 and LAN advertisement version 1.
PREVIOUS_RELEASE = "74bef5a"


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory) -> tuple[list[str], dict[str, str]]:
    """(command line of the previous release's transport_node.py, its environment)."""
    try:
        has_it = _git("cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}").returncode == 0
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout
        has_it = False
    if not has_it:
        pytest.skip(f"the previous release ({PREVIOUS_RELEASE}) is not in this checkout's git history "
                    "(no git, an unpacked archive or a shallow clone): run from a full clone "
                    "(git fetch --unshallow)")
    base = tmp_path_factory.mktemp("previous-release")
    tree, venv = base / "tree", base / "venv"
    tree.mkdir()
    archive = _git("archive", "--format=tar", PREVIOUS_RELEASE, "swarmnode", "tests")
    assert archive.returncode == 0, archive.stderr.decode()[-2000:]
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True, timeout=60)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    Path(site, "libraries-of-this-release.pth").write_text("".join(f"{p}\n" for p in ours))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(tree), str(tree / "tests")))}
    where = subprocess.run([python, "-c", "import swarmnode; print(swarmnode.__file__)"], env=env, cwd=base,
                           capture_output=True, text=True, timeout=60)
    assert where.stdout.startswith(str(tree)), f"the old node would not run the old code: {where}"
    return [python, str(tree / "tests" / "transport_node.py")], env


def _tails(nodes: list[ProcNode]) -> str:
    return "\n".join(f"{n.stderr_path.stem}: {n.stderr_path.read_text()[-1500:]}" for n in nodes)


def _stop_having_dropped_nothing(nodes: list[ProcNode]) -> None:
    """Neither release dropped a message of the other; then each node stops cleanly."""
    assert {n.stderr_path.stem: n.rejected() for n in nodes} == {n.stderr_path.stem: [] for n in nodes}, \
        "neither release drops the other's messages"
    for node in nodes:
        node.stop()


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_the_previous_release_and_this_one_exchange_bundles_both_ways(previous_release, transport, tmp_path):
    """An old bootstrap node, a new node that joins it and an old node that joins the new one
    (all three started at once): each publishes a bundle, and each receives the other two,
    with nothing dropped."""
    program, env = previous_release
    ports = [free_port() for _ in range(3)]
    listen = [f"/ip4/127.0.0.1/tcp/{port}" for port in ports]
    # Started at once, each joining the one before (ports and keys are known in advance).
    nodes = [ProcNode(transport, seed, [f"{listen[seed - 1]}/p2p/{identity_for(seed - 1).peer_id}"] if seed else [],
                      listen[seed], stderr_path=tmp_path / f"{'new' if seed == 1 else 'old'}{seed}.err",
                      **({} if seed == 1 else {"program": program, "env": env}))
             for seed in range(3)]
    try:
        old0, new1, old2 = (node.ready() for node in nodes)
        for node, peer in ((new1, old0), (old2, new1)):
            wait_until(lambda: peer.peer_id in node.peers(), 30, f"{node.stderr_path.stem} to join")
        sent = {node.peer_id: node.publish(1, 5_000)["digest"] for node in nodes}
        for node in nodes:
            expected = {d for sender, d in sent.items() if sender != node.peer_id}
            wait_until(lambda: {m["digest"] for m in node.messages()} >= expected, 45,
                       f"{node.stderr_path.stem} to receive the other nodes' bundles",
                       context=lambda: _tails(nodes))
        _stop_having_dropped_nothing(nodes)
    finally:
        for node in nodes:
            node.kill()


@pytest.fixture
def lan():
    with built_or_skip(SwitchLab(2, multicast=True)) as built:
        yield built


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_the_previous_release_and_this_one_find_each_other_on_a_lan(previous_release, lan, transport, tmp_path):
    """The LAN advertisement changed version (docs/protocol.md, section 4). An old node and a new
    one, each alone in a namespace on one bridge (root only, tests/natlab.py), with no bootstrap
    list, must find each other by mDNS and exchange bundles both ways, with nothing dropped: the
    old node ignores the new record, the new one reads the old record and dials its advertiser,
    and that one connection is the join."""
    program, env = previous_release
    old = ProcNode(transport, 0, listen=f"/ip4/{lan.address(0)}/tcp/0", lan=True, stderr_path=tmp_path / "old0.err",
                   prefix=lan.exec_prefix(0), program=program, env=env)
    new = ProcNode(transport, 1, listen=f"/ip4/{lan.address(1)}/tcp/0", lan=True, stderr_path=tmp_path / "new1.err",
                   prefix=lan.exec_prefix(1))
    nodes = [old, new]
    try:
        for node in nodes:
            node.ready()
        round_no = 0

        def both_ways() -> bool:
            nonlocal round_no
            round_no += 1
            for node in nodes:  # every poll: a bundle published before the join reaches no one
                node.send(cmd="publish", round=round_no, size=2000)
            return all(sender.peer_id in {m["sender"] for m in receiver.messages()}
                       for sender, receiver in ((old, new), (new, old)))

        wait_until(both_ways, 60, "a bundle each way between the releases on one LAN", interval=1.0,
                   context=lambda: _tails(nodes))
        _stop_having_dropped_nothing(nodes)
    finally:
        for node in nodes:
            node.kill()
