"""Receipts (swarmnode.swarm.receipt) and the author's ledger (swarmnode.swarm.ledger).

Through real Exchanges with the real verifier: an author shares a bundle, a trainer trains on
its groups and sends a receipt in its next bundle, the author's ledger counts it once the
trainer is established. Every refusal reason, the wire compatibility with a node that knows
nothing of receipts, the ledger's crash safety and bounds, and a crowd of fresh keys.
"""

from __future__ import annotations

import hashlib
import json
import random
import struct

import pytest

from swarmnode.config import NodeConfig
from swarmnode.records import Group, Question
from swarmnode.swarm import receipt
from swarmnode.swarm.bundle import BundleVerifier, encode_bundle
from swarmnode.swarm.exchange import Exchange
from swarmnode.swarm.identity import Identity
from swarmnode.swarm.ledger import Ledger, LedgerLimits
from swarmnode.swarm.receipt import ReceiptLimits, ReceiptRejected
from swarmnode.swarm.standing import PROMOTIONS_PER_ROUND
from swarmnode.train.tasks import Scorer

SWARM = "receipt-test"
AUTHOR = Identity.from_seed(b"A" * 32)
TRAINER = Identity.from_seed(b"T" * 32)
NOW = 1_800_000_000.0


def signal_groups(n: int, first: int = 0) -> list[Group]:
    """One right and one wrong answer per question: signal once re-scored."""
    return [Group(Question("chain_sum", f"What is {i} + 2?", str(i + 2), {"num_terms": 2, "num_digits": 1}),
                  [f"<answer>{i + 2}</answer>", "<answer>x</answer>"], [1.0, 0.0]) for i in range(first, first + n)]


def exchange(who: Identity, tmp_path, probation: int = 1) -> Exchange:
    # One peer may fill every slot here: the tests count exactly what was drawn.
    cfg = NodeConfig(swarm=SWARM, solo=False, probation_rounds=probation, max_peer_share=1.0, newcomer_share=1.0,
                     external_sampling="uniform")  # every pooled group may be drawn, whatever its reward
    return Exchange(who, cfg, Scorer(), "m", credits_dir=tmp_path / who.name)


def establish(ex: Exchange, peer: Exchange, rounds: int = 2) -> None:
    """``peer`` shares useful bundles with ``ex`` until ``ex`` holds it established."""
    for r in range(rounds):
        ex.draw(100 + r, 0, random.Random(r))
        assert ex.receive(peer.outgoing(r, signal_groups(2, 1000 + 10 * r))).accepted
    ex.draw(100 + rounds, 0, random.Random(0))
    assert ex.standing.is_established(peer.identity.peer_id)


def trained_receipt_bundle(author: Exchange, trainer: Exchange, n: int = 4, round_no: int = 7) -> bytes:
    """``author`` shares ``n`` groups; ``trainer`` takes them, trains on them, shares its next bundle."""
    assert trainer.receive(author.outgoing(round_no, signal_groups(n))).accepted
    drawn = trainer.draw(round_no, n, random.Random(1))
    assert len(drawn) == n and all(g.origin is not None for g in drawn)
    trainer.trained_on(round_no, drawn)
    return trainer.outgoing(round_no + 1, signal_groups(2, 500))


def test_a_receipt_reaches_its_author_and_counts_each_group_once(tmp_path):
    author, trainer = exchange(AUTHOR, tmp_path), exchange(TRAINER, tmp_path)
    establish(author, trainer)
    data = trained_receipt_bundle(author, trainer)
    assert author.receive(data).accepted
    summary = author.ledger.summary()
    assert summary["total"] == {"groups": 4, "with_signal": 4, "peers": 1, "receipts": 1}
    assert summary["last_hour"]["groups"] == 4 and summary["last_day"]["groups"] == 4
    assert summary["by_peer"][0]["peer_id"] == TRAINER.peer_id and summary["by_peer"][0]["groups"] == 4
    assert summary["refused"] == {}


def test_a_node_that_knows_no_receipts_accepts_a_bundle_carrying_them(tmp_path):
    author, trainer = exchange(AUTHOR, tmp_path), exchange(TRAINER, tmp_path)
    data = trained_receipt_bundle(author, trainer)
    body, section = receipt.split(data)
    assert section is not None and body != data
    # The verifier reads the whole bytes exactly as a node of the previous release does.
    old = BundleVerifier(swarm=SWARM, own_peer_id=AUTHOR.peer_id)
    verdict = old.check(data)
    assert verdict.accepted, verdict.reason
    assert verdict.bundle.digest == BundleVerifier(swarm=SWARM, own_peer_id="x").check(body).bundle.digest


def test_a_newcomers_receipt_waits_and_counts_once_it_is_established(tmp_path):
    author, trainer = exchange(AUTHOR, tmp_path, probation=2), exchange(TRAINER, tmp_path)
    author.draw(0, 0, random.Random(0))
    assert author.receive(trained_receipt_bundle(author, trainer)).accepted  # useful bundle 1 of 2
    assert author.ledger.summary()["total"]["groups"] == 0 and author.ledger.summary()["pending"] == 1
    author.draw(1, 0, random.Random(0))
    assert author.receive(trainer.outgoing(9, signal_groups(2, 700))).accepted  # useful bundle 2
    author.draw(2, 0, random.Random(0))  # promoted; the waiting receipt counts
    assert author.ledger.summary()["total"]["groups"] == 4 and author.ledger.summary()["pending"] == 0


def forged_section(entries: list, version: int = 1) -> bytes:
    content = receipt.SECTION_MAGIC + bytes([version]) + json.dumps({"receipts": entries}).encode()
    return content


def signed(identity: Identity, payload: dict) -> dict:
    body = receipt.canonical_json(payload)
    return {"payload": payload, "signature": identity.sign(receipt.SIGNING_DOMAIN + body).hex()}


def payload(author: str = AUTHOR.peer_id, trainer: str = TRAINER.peer_id, *, digest: str = "a" * 64, round_no=3,
            bundle_round: int = 7, keys=("b" * 32,), created: float = NOW, swarm: str = SWARM) -> dict:
    return {"swarm": swarm, "trainer": trainer, "round": round_no, "author": author, "created": created,
            "bundles": [{"round": bundle_round, "digest": digest,
                         "groups": [{"key": k, "reward": 0.5, "signal": True} for k in keys]}]}


def refusal(entry, sender: str = TRAINER.peer_id) -> str:
    with pytest.raises(ReceiptRejected) as exc:
        receipt.verify(entry, sender=sender, swarm=SWARM, now=NOW)
    return exc.value.reason


def test_each_refusal_of_a_receipt_on_its_own():
    good = signed(TRAINER, payload())
    assert receipt.verify(good, sender=TRAINER.peer_id, swarm=SWARM, now=NOW).trainer == TRAINER.peer_id
    assert refusal("junk") == "bad_field"
    assert refusal({**good, "signature": "zz" * 64}) == "bad_field"
    assert refusal({**good, "signature": "00" * 64}) == "bad_signature"
    assert refusal(signed(AUTHOR, payload())) == "bad_signature"  # another key signed it
    tampered = {**good, "payload": {**good["payload"], "round": 4}}
    assert refusal(tampered) == "bad_signature"
    assert refusal(good, sender=AUTHOR.peer_id) == "wrong_trainer"
    assert refusal(signed(TRAINER, {**payload(), "extra": 1})) == "bad_field"
    assert refusal(signed(TRAINER, payload(round_no=-1))) == "bad_field"
    assert refusal(signed(TRAINER, payload(digest="xyz"))) == "bad_field"
    assert refusal(signed(TRAINER, payload(keys=[]))) == "bad_field"
    assert refusal(signed(TRAINER, payload(swarm="other"))) == "wrong_swarm"
    assert refusal(signed(TRAINER, payload(created=NOW - 2 * 86_400))) == "stale"
    assert refusal(signed(TRAINER, payload(created=NOW + 3600))) == "stale"
    assert refusal(signed(TRAINER, payload(keys=[f"{i:032x}" for i in range(60)]))) == "too_large"


def test_each_refusal_of_a_section():
    def reason(content: bytes) -> str:
        with pytest.raises(ReceiptRejected) as exc:
            receipt.open_section(content)
        return exc.value.reason

    assert reason(b"XXX\x01{}") == "malformed"
    assert reason(forged_section([], version=9)) == "bad_version"
    assert reason(receipt.SECTION_MAGIC + b"\x01{not json") == "malformed"
    assert reason(receipt.SECTION_MAGIC + b"\x01[1]") == "malformed"
    assert reason(receipt.SECTION_MAGIC + b"\x01" + b"[" * 100_000) in ("malformed", "too_large")
    assert reason(forged_section([{}] * 65)) == "too_large"
    assert reason(forged_section([]) + b" " * 50_000) == "too_large"


def test_split_leaves_a_frame_that_runs_past_the_data_in_place():
    data = b"S" * receipt.HEADER_BYTES + receipt.SKIPPABLE_MAGIC + struct.pack("<I", 10_000) + b"short"
    assert receipt.split(data) == (data, None)
    assert receipt.split(b"short") == (b"short", None)


def test_the_ledger_refuses_what_the_author_never_shared(tmp_path):
    author, trainer = exchange(AUTHOR, tmp_path), exchange(TRAINER, tmp_path)
    establish(author, trainer)
    groups = signal_groups(3)
    author.outgoing(7, groups)
    digest = next(iter(author.ledger._shared))  # noqa: SLF001 - the digest the author remembers
    keys = [receipt.group_key(g) for g in groups]
    ledger = author.ledger

    def offer(**kw) -> str | None:
        return ledger.offer(receipt.verify(signed(TRAINER, payload(created=NOW, **kw)), sender=TRAINER.peer_id,
                                           swarm=SWARM, now=NOW), NOW)

    assert offer(digest="c" * 64, keys=keys[:1]) == "unknown_bundle"
    assert offer(digest=digest, bundle_round=8, keys=keys[:1]) == "unknown_bundle"
    assert offer(digest=digest, keys=["d" * 32]) == "unknown_group"
    assert offer(digest=digest, keys=[keys[0], keys[0]], round_no=2) is None  # named twice: counted once
    assert offer(digest=digest, keys=keys[:2]) is None  # only the second group is new
    assert offer(digest=digest, keys=keys[:2]) == "replay"  # the same trainer round again
    assert offer(digest=digest, keys=keys[:2], round_no=4) == "nothing_new"
    assert offer(digest=digest, keys=keys, round_no=5) is None  # only the third group is new
    assert ledger.summary(NOW)["total"] == {"groups": 3, "with_signal": 3, "peers": 1, "receipts": 3}
    assert ledger.refused == {"unknown_bundle": 2, "unknown_group": 1, "replay": 1, "nothing_new": 1}


def test_a_forged_or_garbage_section_in_a_genuine_bundle_is_counted_never_raised(tmp_path):
    author, trainer = exchange(AUTHOR, tmp_path), exchange(TRAINER, tmp_path)
    establish(author, trainer)
    data = trained_receipt_bundle(author, trainer)
    body, section = receipt.split(data)
    entries = json.loads(section[4:])["receipts"]
    entries[0]["payload"]["bundles"][0]["groups"][0]["reward"] = 1.0  # tampered: signature fails
    frame = receipt.SECTION_MAGIC + b"\x01" + receipt.canonical_json({"receipts": entries})
    for content in (frame, b"SNR\x01\xff\xfe", b"SNR\x07{}"):
        wire = body[:receipt.HEADER_BYTES] + receipt.SKIPPABLE_MAGIC + struct.pack("<I", len(content)) \
            + content + body[receipt.HEADER_BYTES:]
        author.verifier._seen.clear()  # noqa: SLF001 - the same bundle again, for its section
        assert author.receive(wire).accepted
    assert author.ledger.refused == {"bad_signature": 1, "malformed": 1, "bad_version": 1}
    assert author.ledger.summary()["total"]["groups"] == 0


def test_receipts_for_other_authors_are_skipped_unverified(tmp_path):
    other = Identity.from_seed(b"O" * 32)
    author, trainer = exchange(AUTHOR, tmp_path), exchange(TRAINER, tmp_path)
    bystander = exchange(other, tmp_path)
    establish(bystander, trainer)
    assert bystander.receive(trained_receipt_bundle(author, trainer)).accepted
    assert bystander.ledger.summary()["total"]["receipts"] == 0 and bystander.ledger.refused == {}


def test_200_fresh_keys_inflate_nothing(tmp_path):
    """200 keys, each having really trained on the author's bundle, send receipts: none counts
    while they are newcomers, the waiting room stays bounded, and even with every key sending
    a useful bundle every round, in the author's round R at most PROMOTIONS_PER_ROUND x (R - 2)
    of them count (probation 3; docs/reliability.md)."""
    author = exchange(AUTHOR, tmp_path, probation=3)
    bundle = author.outgoing(7, signal_groups(4))
    crowd = [Exchange(Identity.from_seed(hashlib.sha256(f"fresh-{i}".encode()).digest()),
                      NodeConfig(swarm=SWARM, solo=False), Scorer(), "m") for i in range(200)]
    for i, sybil in enumerate(crowd):
        assert sybil.receive(bundle).accepted
        sybil.trained_on(1, sybil.draw(1, 4, random.Random(i)))  # one newcomer slot of 4: 1 group
    rounds = 6
    for r in range(rounds):
        author.draw(r, 0, random.Random(r))  # the author's round r begins: up to 2 promotions
        if r == 0:
            assert author.ledger.summary()["total"]["groups"] == 0
        for i, sybil in enumerate(crowd):
            assert author.receive(sybil.outgoing(2 + r, signal_groups(1, 10_000 + 1000 * r + i))).accepted
    author.draw(rounds, 0, random.Random(0))
    summary = author.ledger.summary()
    promoted = PROMOTIONS_PER_ROUND * (rounds - 2)
    assert summary["total"]["peers"] == promoted and summary["total"]["groups"] == promoted
    assert summary["pending"] == 200 - promoted <= LedgerLimits().max_pending


def test_the_ledger_survives_a_torn_last_line_and_a_restart(tmp_path):
    author, trainer = exchange(AUTHOR, tmp_path), exchange(TRAINER, tmp_path)
    establish(author, trainer)
    data = trained_receipt_bundle(author, trainer)
    assert author.receive(data).accepted
    path = author.ledger.receipts_file
    with open(path, "ab") as fh:
        fh.write(b'{"at": 1, "trainer": "x", "ro')  # a crash mid-append
    again = Ledger(path.parent, author.standing.is_established)
    assert again.summary()["total"] == author.ledger.summary()["total"]
    assert path.read_bytes().endswith(b"\n") and b'"ro' not in path.read_bytes().splitlines()[-1][-4:]
    # The restarted ledger remembers the shared bundles and what was credited: the replay counts nothing.
    body, section = receipt.split(data)
    entry = json.loads(section[4:])["receipts"][0]
    rec = receipt.verify(entry, sender=TRAINER.peer_id, swarm=SWARM, now=entry["payload"]["created"])
    assert again.offer(rec) == "replay"


def test_the_ledger_stays_bounded_whatever_peers_send(tmp_path):
    limits = LedgerLimits(shared_window=2, max_trainers_per_bundle=3, max_groups=2, max_pending=4, max_credits=24)
    ledger = Ledger(tmp_path, lambda peer: not peer.startswith("new"), limits)
    keys = [f"{i:032x}" for i in range(3)]

    def rec(trainer: str, round_no: int, bundle_round: int, key: str) -> receipt.Receipt:
        return receipt.Receipt(SWARM, trainer, round_no, AUTHOR.peer_id, NOW,
                               ((bundle_round, f"{bundle_round:064x}", (receipt.Credit(key, 1.0, True),)),), "")

    for r in range(20):
        ledger.note_shared(r, f"{r:064x}", keys[:2])
        for t in range(3):
            for k in range(2):
                assert ledger.offer(rec(f"t{t}", 10 * r + k, r, keys[k]), NOW) is None
        assert ledger.offer(rec("t3", 10 * r, r, keys[0]), NOW) == "bundle_full"
        assert ledger.offer(rec("t0", 10 * r + 5, r, keys[2]), NOW) == "unknown_group"
        assert len(ledger.receipts_file.read_text().splitlines()) <= limits.max_credits  # a credit a line here
    assert [row[1] for row in json.loads(ledger.shared_file.read_text())] == [18, 19]
    assert ledger.offer(rec("t0", 999, 17, keys[0]), NOW) == "unknown_bundle"  # out of the window
    # Compaction kept every credit of the bundles still in the window: none can be counted again.
    for r in (18, 19):
        assert ledger.offer(rec("t0", 10 * r, r, keys[0]), NOW) == "replay"
        assert ledger.offer(rec("t1", 1000 + r, r, keys[1]), NOW) == "nothing_new"
    for i in range(10):
        assert ledger.offer(rec(f"new{i}", 0, 19, keys[1]), NOW) == "pending"
    assert ledger.summary(NOW)["pending"] == 4 and ledger.refused["pending_full"] == 6
    assert ledger.summary(NOW)["total"]["groups"] <= limits.max_credits
    with pytest.raises(ValueError, match="max_credits"):
        LedgerLimits(max_credits=100)


def test_compaction_bounds_credits_however_many_a_line_holds(tmp_path):
    limits = LedgerLimits(shared_window=1, max_trainers_per_bundle=2, max_groups=4, max_credits=16)
    ledger = Ledger(tmp_path, lambda peer: True, limits)
    keys = tuple(receipt.Credit(f"{i:032x}", 1.0, True) for i in range(4))
    for r in range(10):
        ledger.note_shared(r, f"{r:064x}", [c.key for c in keys])
        for t in ("t0", "t1"):
            rec = receipt.Receipt(SWARM, t, r, AUTHOR.peer_id, NOW, ((r, f"{r:064x}", keys),), "")
            assert ledger.offer(rec, NOW) is None
            on_disk = [json.loads(line)["credits"] for line in ledger.receipts_file.read_text().splitlines()]
            assert sum(map(len, on_disk)) <= limits.max_credits
            assert ledger.summary(NOW)["total"]["groups"] <= limits.max_credits
    again = receipt.Receipt(SWARM, "t0", 99, AUTHOR.peer_id, NOW, ((9, f"{9:064x}", keys),), "")
    assert ledger.offer(again, NOW) == "nothing_new"  # the window's credits survived every compaction


def test_section_caps_leave_out_receipts_that_do_not_fit():
    entries = [signed(TRAINER, payload(author=f"a{i}")) for i in range(10)]
    bundle = encode_bundle(TRAINER, swarm=SWARM, round_no=1, model="m", groups=signal_groups(1))
    small = receipt.attach(bundle, entries, ReceiptLimits(max_section_bytes=2000))
    kept = receipt.open_section(receipt.split(small)[1])
    assert 0 < len(kept) < 10 and len(receipt.split(small)[1]) <= 2000
    assert receipt.attach(bundle, entries, ReceiptLimits(max_section_bytes=10)) == bundle
    # Never past the bundle's wire cap: a receiver (of any release) refuses a bundle over it.
    capped = receipt.attach(bundle, entries, max_bytes=len(bundle) + 1500)
    assert len(bundle) < len(capped) <= len(bundle) + 1500
    assert receipt.attach(bundle, entries, max_bytes=len(bundle) + 100) == bundle
