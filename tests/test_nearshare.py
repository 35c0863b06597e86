"""The draw weighed by how much of each peer's completions, per family, the updates kept, or
passing over the pairs the last update left mostly out (swarmnode.swarm.nearshare,
swarmnode.sampling.NearWeighted and NearSkipping, weigh_draw_by_nearness, skip_far_peer_rounds)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from swarmnode.config import NodeConfig
from swarmnode.experiment.members import exchange_state, restore_exchange
from swarmnode.records import Group, Question
from swarmnode.sampling import MODES, NearSkipping, NearWeighted, Uniform, sampling_mode
from swarmnode.swarm.bundle import encode_bundle
from swarmnode.swarm.exchange import Exchange
from swarmnode.swarm.identity import Identity
from swarmnode.swarm.nearshare import NearShare
from swarmnode.swarm.pool import ExternalPool, OwnRewards
from swarmnode.train.tasks import Scorer

SWARM = "near-test"
NODE, NEAR, FAR = (Identity.from_seed(bytes([c]) * 32) for c in b"NAF")


def chain_sum(i: int) -> Question:
    return Question("chain_sum", f"What is {i} + 2?", str(i + 2), {"num_terms": 2, "num_digits": 1})


def test_the_share_is_smoothed_kept_over_weighed_within_a_window():
    near = NearShare(window=4)
    assert near.share("p", "gcd") == 0.5  # never weighed: half
    near.note({("p", "gcd"): (3, 3), ("q", "gcd"): (2, 0)})
    assert near.share("p", "gcd") == pytest.approx(1 / 5) and near.share("q", "gcd") == pytest.approx(3 / 4)
    assert near.share("p", "chain_sum") == 0.5  # per family
    near.note({("p", "gcd"): (3, 0)})  # the window keeps the last 4: one far, three kept
    assert near.share("p", "gcd") == pytest.approx(4 / 6)


def test_the_pairs_are_bounded_and_the_least_recently_weighed_leaves():
    near = NearShare(max_pairs=2)
    near.note({("a", "f"): (2, 2)})
    near.note({("b", "f"): (2, 2)})
    near.note({("a", "f"): (1, 1)})  # a is weighed again: b is now the oldest
    near.note({("c", "f"): (2, 2)})
    assert near.share("b", "f") == 0.5 and near.share("a", "f") == pytest.approx(1 / 5)


def test_the_shares_survive_their_json_and_a_damaged_one_changes_nothing():
    near = NearShare()
    near.note({("p", "gcd"): (4, 1)})
    again = NearShare()
    again.restore(near.to_json())
    assert again.share("p", "gcd") == near.share("p", "gcd") == pytest.approx(4 / 6)
    again.restore([["p", "gcd", [True, False]]])  # the bare rows of a release before skips
    assert again.share("p", "gcd") == pytest.approx(2 / 4)
    again.restore(near.to_json())
    for damaged in ([["p", "gcd"]], [5], [["p", "gcd", 5]], {"skip": []}, {"kept": [], "skip": [["p"]]}):
        with pytest.raises(ValueError):
            again.restore(damaged)
        assert again.share("p", "gcd") == pytest.approx(4 / 6)


def test_near_weighted_multiplies_the_modes_weight_and_keeps_its_exclusions():
    near = NearShare()
    near.note({("far", "chain_sum"): (8, 8)})
    g_far, g_near = (Group(chain_sum(1), ["a", "b"], [1.0, 0.0], source=s) for s in ("far", "near"))
    weigh = NearWeighted(Uniform(), near).weigher()
    assert weigh(g_far) == pytest.approx(1 / 10) and weigh(g_near) == 0.5
    own = OwnRewards()
    own.note([Group(chain_sum(2), ["a", "b"], [1.0, 1.0])])  # this node scores 1 on chain_sum
    assert NearWeighted(sampling_mode("above-own", None, own), near).weigher()(g_near) is None
    assert "" not in MODES  # the wrapper is not a mode of its own


def test_the_pool_draws_the_peer_whose_completions_the_updates_kept():
    near = NearShare()
    near.note({("far", "chain_sum"): (16, 16), ("near", "chain_sum"): (16, 0)})
    pool = ExternalPool()
    for peer in ("far", "near"):
        pool.add(0, [Group(chain_sum(i), ["a", "b"], [1.0, 0.0], source=peer) for i in range(8)])
    drawn = Counter(g.source for r in range(200)
                    for g in pool.sample(1, random.Random(r), mode=NearWeighted(Uniform(), near)))
    # peers weighed 1/18 against 17/18: about 11 of 200 from the far one
    assert drawn["near"] > 170 and 0 < drawn["far"] < 30


def test_a_pair_left_mostly_out_is_skipped_for_its_rounds_then_drawn_again():
    near = NearShare(skip_rounds=2)
    near.note({("far", "gcd"): (4, 3), ("half", "gcd"): (4, 2), ("near", "gcd"): (4, 0)})
    assert near.skipped("far", "gcd") and not near.skipped("half", "gcd") and not near.skipped("near", "gcd")
    assert not near.skipped("far", "chain_sum")  # per family
    near.note({})
    assert near.skipped("far", "gcd")
    saved = NearShare(skip_rounds=2)
    saved.restore(near.to_json())
    assert saved.skipped("far", "gcd")
    near.note({})  # two updates since: drawn again
    assert not near.skipped("far", "gcd")
    saved.note({("far", "gcd"): (4, 1)})  # measured nearer before its rounds ran out: drawn again
    assert not saved.skipped("far", "gcd")
    off = NearShare()
    off.note({("far", "gcd"): (4, 4)})
    assert not off.skipped("far", "gcd")
    g_far, g_near = (Group(chain_sum(1), ["a", "b"], [1.0, 0.0], source=s) for s in ("far", "near"))
    near.note({("far", "chain_sum"): (4, 4)})
    weigh = NearSkipping(Uniform(), near).weigher()
    assert weigh(g_far) is None and weigh(g_near) == 1.0


def _exchange(weigh: bool, skip: int = 0) -> Exchange:
    cfg = NodeConfig(swarm=SWARM, solo=False, newcomer_share=1.0, max_peer_share=1.0, weigh_draw_by_nearness=weigh,
                     skip_far_peer_rounds=skip)
    ex = Exchange(NODE, cfg, Scorer(), "m", families=("chain_sum",))
    for key in (NEAR, FAR):
        groups = [Group(chain_sum(i), [f"<answer>{i + 2}</answer>", "<answer>x</answer>"], [0.0, 0.0])
                  for i in range(4)]
        assert ex.receive(encode_bundle(key, swarm=SWARM, round_no=0, model="m", groups=groups)).accepted
    return ex


def test_an_exchange_weighs_its_draw_by_what_its_updates_left_out_only_when_set():
    draws = {}
    for weigh in (False, True):
        ex = _exchange(weigh)
        ex.judge_training({(NEAR.peer_id, "chain_sum"): (16, 0), (FAR.peer_id, "chain_sum"): (16, 16)})
        row = {r["peer_id"]: r for r in ex.peer_rows()}
        assert row[FAR.peer_id]["left_out_by_reason"] == {"far_from_policy": 16}
        assert row[NEAR.peer_id]["logprob_measured"] == 16
        draws[weigh] = Counter(g.source for r in range(100) for g in ex.draw(r, 1, random.Random(r)))
    assert draws[True][FAR.peer_id] < 15 < 30 < draws[False][FAR.peer_id]


def test_an_exchange_skips_a_far_peer_for_its_rounds_only_when_set():
    for skip in (0, 3):
        ex = _exchange(False, skip)
        ex.judge_training({(NEAR.peer_id, "chain_sum"): (4, 0), (FAR.peer_id, "chain_sum"): (4, 4)})
        during = Counter(g.source for r in range(50) for g in ex.draw(1, 2, random.Random(r)))
        assert (during[FAR.peer_id] == 0) == bool(skip) and during[NEAR.peer_id] > 0
        for _ in range(skip):
            ex.judge_training({})
        after = Counter(g.source for r in range(50) for g in ex.draw(1 + skip, 2, random.Random(r)))
        assert after[FAR.peer_id] > 0


def test_an_experiment_checkpoint_carries_the_shares_and_reads_one_without_them():
    ex = _exchange(True)
    ex.judge_training({(FAR.peer_id, "chain_sum"): (4, 4)})
    state = exchange_state(ex)
    again = _exchange(True)
    restore_exchange(again, state)
    assert again.near.share(FAR.peer_id, "chain_sum") == pytest.approx(1 / 6)
    older = _exchange(True)
    restore_exchange(older, {k: v for k, v in state.items() if k != "near"})
    assert older.near.share(FAR.peer_id, "chain_sum") == 0.5
