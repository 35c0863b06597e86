"""One node of the receipts tests: a real transport and a real Exchange with its ledger, in a
process of its own, driven over stdin/stdout with JSON lines by :class:`ReceiptNode`.

    python tests/receipt_node.py --transport libp2p --seed 0 [--listen MA] [--bootstrap MA ...]

Every message the transport delivers goes through ``Exchange.receive`` (bundle checks,
re-scoring with the real verifier, receipts to the ledger); the node prints
``{"event": "accepted", "sender", "round"}`` or ``{"event": "refused", "sender", "reason"}``.
Commands (one JSON object a line): ``share`` {round}: publish this node's bundle of the round
(its own groups, with signal, and the receipts of its latest update); ``train`` {round, n}:
draw n external groups and train on them (``Exchange.trained_on``), answering the credits it
owes as ``[author, bundle digest, group key]``; ``ledger``: answers the lines of its
``receipts.jsonl`` (docs/protocol.md, "The ledger") and its summary; ``stop``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from swarmnode.config import NodeConfig  # noqa: E402
from swarmnode.records import Group, Question  # noqa: E402
from swarmnode.swarm.exchange import Exchange  # noqa: E402
from swarmnode.swarm.receipt import group_key  # noqa: E402
from swarmnode.swarm.transport import create_transport  # noqa: E402
from swarmnode.train.tasks import Scorer  # noqa: E402
from transport_node import SWARM, ProcNode, identity_for  # noqa: E402


def own_groups(seed: int, round_no: int, n: int = 4) -> list[Group]:
    """This node's groups of a round: one right and one wrong answer each (signal once re-scored)."""
    return [Group(Question("chain_sum", f"Node {seed}, round {round_no}: what is {i} + {seed}?", str(i + seed),
                           {"num_terms": 2, "num_digits": 1}),
                  [f"<answer>{i + seed}</answer>", "<answer>x</answer>"], [1.0, 0.0]) for i in range(n)]


async def _serve(args: argparse.Namespace, home: Path) -> None:
    loop = asyncio.get_running_loop()

    def emit(obj: dict) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    identity = identity_for(args.seed)
    # Probation of one round and no caps per peer: three nodes trade every group they can.
    cfg = NodeConfig(swarm=args.swarm, solo=False, probation_rounds=1, max_peer_share=1.0, newcomer_share=1.0,
                     external_sampling="uniform")  # every pooled group may be drawn, whatever its reward
    exchange = Exchange(identity, cfg, Scorer(), "receipts", credits_dir=home / "credits")
    transport = create_transport(args.transport, identity, args.swarm, bootstrap=args.bootstrap, listen=args.listen)

    def on_message(data: bytes) -> None:
        verdict = exchange.receive(data)
        emit({"event": "accepted", "sender": verdict.sender, "round": verdict.bundle.round} if verdict.accepted
             else {"event": "refused", "sender": verdict.sender, "reason": verdict.reason})

    transport.set_handler(on_message)
    transport.set_reject_handler(lambda author, reason: emit({"event": "refused", "sender": author, "reason": reason}))
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await transport.start()
    emit({"event": "ready", "peer_id": identity.peer_id, "addresses": transport.addresses(), "start_s": 0.0})
    while line := await reader.readline():
        command = json.loads(line)
        if command["cmd"] == "share":
            data = exchange.outgoing(command["round"], own_groups(args.seed, command["round"]))
            await transport.publish(command["round"], data)
            emit({"event": "shared", "round": command["round"], "bytes": len(data)})
        elif command["cmd"] == "peers":
            emit({"event": "peers", "peers": transport.peers()})
        elif command["cmd"] == "train":
            drawn = exchange.draw(command["round"], command["n"], random.Random(command["round"]))
            exchange.trained_on(command["round"], drawn)
            emit({"event": "trained", "credits": [[g.source, g.origin[1], group_key(g)] for g in drawn]})
        elif command["cmd"] == "ledger":
            path = home / "credits" / "receipts.jsonl"
            lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
            emit({"event": "ledger", "lines": lines, "summary": exchange.ledger.summary()})
        elif command["cmd"] == "stop":
            break
    await transport.stop()
    emit({"event": "stopped", "threads": [], "children_after": []})


class ReceiptNode(ProcNode):
    """:class:`ProcNode` running this script."""

    SCRIPT = Path(__file__).resolve()

    def share(self, round_no: int) -> dict:
        self.send(cmd="share", round=round_no)
        return self.wait_event("shared", 30)

    def train(self, round_no: int, n: int) -> list[list[str]]:
        self.send(cmd="train", round=round_no, n=n)
        return self.wait_event("trained", 30)["credits"]

    def ledger(self) -> dict:
        self.send(cmd="ledger")
        return self.wait_event("ledger", 30)

    def accepted(self) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["event"] == "accepted"]

    def refused(self) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["event"] == "refused"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", required=True, choices=("hivemind", "libp2p"))
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--swarm", default=SWARM)
    parser.add_argument("--listen", default="/ip4/127.0.0.1/tcp/0")
    parser.add_argument("--bootstrap", action="append", default=[])
    parser.add_argument("--signal-grace", type=float, default=0.0, help="taken for ProcNode's sake; unused")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="receipt-node-") as home:
        asyncio.run(_serve(args, Path(home)))


if __name__ == "__main__":
    main()
