"""A node trains on a peer's response only in the form it would itself have written and scored.

The attacker here writes its bundles by hand (``tests/stranger_keys.py``: the protocol
document's bytes, no swarmnode code): every response it sends scores as a right or wrong
answer should, and carries a marker string this node would never write, before, between and
after answer tags, with the answer tag prefilled and not. What a real :class:`Exchange`
(with the real verifier) pools, what :meth:`Policy.train_step` encodes, and what the tiny
model learns in a few rounds beside it are checked against the same run beside an honest peer.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from apifakes import FakeControl, make_state, metric_values, metrics_text
from stranger_keys import Key, signed_bundle
from swarmnode.cli.status import peer_table_lines
from swarmnode.config import NodeConfig
from swarmnode.node.round import select_training_set
from swarmnode.records import Group, Question
from swarmnode.swarm.exchange import Exchange
from swarmnode.swarm.identity import Identity
from swarmnode.train.answers import LEFT_OUT_REASONS, TokenBudget, canonical_response, extract_answer
from swarmnode.train.model import load_base_model
from swarmnode.train.nearness import Nearness
from swarmnode.train.policy import Policy
from swarmnode.train.tasks import Scorer
from tinymodel import TEST_DEVICE

SWARM = "verified-test"
NODE = Identity.from_seed(b"V" * 32)
ATTACKER, HONEST = Key.from_seed(b"A" * 32), Key.from_seed(b"H" * 32)
MARK = "zqxjvkw"  # what the attacker wants this node to write


@pytest.mark.parametrize("response, form", [
    ("<answer>5</answer>", "<answer>5</answer>"),
    ("<answer> 5 </answer>\n", "<answer>5</answer>"),
    (f"{MARK} <answer>5</answer> {MARK}", "<answer>5</answer>"),
    (f"<answer>5</answer>{MARK}<answer>5</answer>", "<answer>5</answer>"),
    (f"<answer>5\n{MARK}", "<answer>5"),  # cut off by a token limit: the first line, as the verifier reads it
    ("<answer></answer>", "<answer></answer>"),
    ("no tag", "no_answer"),
    ("<answer>  \n", "no_answer"),
    (f"<answer>{MARK}<answer>5</answer>", "nested_tag"),
    (f"<answer>{MARK}<answer>5", "nested_tag"),
])
def test_the_trained_form_of_a_response(response, form):
    got = canonical_response(response)
    assert (got if isinstance(got, str) else got[0]) == form


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<answer>", "</answer>", "\n", " ", "5", MARK, "<answer", "answer>"]), max_size=12)
       .map("".join) | st.text(max_size=60))
def test_any_response_has_one_trained_form_or_a_reason(response):
    """Whatever a peer sends: a stable reason, or a form whose one answer is what extraction reads
    of it, holds no tag, and is no longer than the response."""
    got = canonical_response(response)
    if isinstance(got, str):
        assert got in LEFT_OUT_REASONS
        return
    form, answer = got
    assert form in (f"<answer>{answer}</answer>", f"<answer>{answer}")
    assert extract_answer(form) == answer and "<answer>" not in answer and "</answer>" not in answer
    assert len(form) <= len(response) + len("</answer>") and answer in response


def question(i: int) -> Question:
    return Question("chain_sum", f"What is {i} + 2?", str(i + 2), {"num_terms": 2, "num_digits": 1})


def fields(q: Question, responses: list[str]) -> dict:
    return {"answer": q.answer, "family": q.family, "level": 0, "metadata": dict(q.metadata),
            "question": q.question, "responses": responses, "rewards": [1.0] * len(responses)}


def attack(i: int, prefill: bool) -> list[str]:
    """Right and wrong answers, each with the marker where this node's sampler never puts text;
    with ``prefill`` every response starts in the tag, as that node's model writes them."""
    right, wrong = str(i + 2), str(i + 9)
    before = "" if prefill else f"{MARK} "
    return [f"{before}<answer>{right}</answer>{MARK}",                      # after the pair
            f"{before}<answer>{wrong}</answer> {MARK}",
            f"{before}<answer>{right}</answer>{MARK}<answer>{right}</answer>",  # between two pairs
            f"{before}<answer>{wrong}\n{MARK}",                               # after a cut-off answer
            f"{before}<answer>{wrong}</answer>{MARK}<answer>{right}</answer>",  # score_changed
            f"{before}<answer>{MARK}<answer>{right}</answer>",                # nested_tag
            f"{before}<answer>{right}<|im_end|>{MARK}</answer>",               # special_token
            f"{before}<answer>{right}{' ' * 3}{'0' * 40}</answer>"]             # over_budget
            # (the last scores 0 and says no more than "right", but is more tokens than the node writes)


def honest(i: int) -> list[str]:
    """What an honest peer whose model writes the same answers shares: the attack's trained forms."""
    right, wrong = str(i + 2), str(i + 9)
    return [f"<answer>{right}</answer>", f"<answer>{wrong}</answer>", f"<answer>{right}</answer>",
            f"<answer>{wrong}"]


def node_exchange(policy: Policy) -> Exchange:
    cfg = NodeConfig(swarm=SWARM, solo=False, newcomer_share=1.0, max_peer_share=1.0,
                     prefill_answer_tag=policy.cfg.prefill_answer_tag, max_new_tokens=policy.cfg.max_new_tokens)
    scorer = Scorer(budget=TokenBudget(policy.tokenizer, cfg.max_new_tokens, cfg.prefill_answer_tag))
    return Exchange(NODE, cfg, scorer, "tiny")


def make_policy(model_dir, prefill: bool) -> Policy:
    torch.manual_seed(0)
    cfg = NodeConfig(lora_r=4, lora_alpha=8, learning_rate=0.02, micro_batch=8, max_grad_norm=0.0,
                     prefill_answer_tag=prefill, max_new_tokens=12, completions=4, questions=2)
    return Policy(load_base_model(str(model_dir), torch.device(TEST_DEVICE)), cfg)


class Spy:
    """Records every (prompt, completion) pair :meth:`Policy.train_step` encodes, as text."""

    def __init__(self, policy: Policy):
        self.completions: list[str] = []
        encode = policy._encode_pairs

        def spying(pairs):
            out = encode(pairs)
            self.completions += [policy.tokenizer.decode(c, skip_special_tokens=False) for _, c in out]
            return out

        policy._encode_pairs = spying


@pytest.mark.parametrize("prefill", [True, False])
def test_no_injected_text_reaches_the_tokens_trained_on(tiny_model_dir, prefill):
    policy = make_policy(tiny_model_dir, prefill)
    ex = node_exchange(policy)
    for r in range(3):
        assert ex.receive(signed_bundle(ATTACKER, SWARM, r, [fields(question(i), attack(i, prefill))
                                                             for i in range(4)])).accepted
    row = next(r for r in ex.peer_rows() if r["peer_id"] == ATTACKER.peer_id)
    assert row["left_out_by_reason"] == {"score_changed": 12, "nested_tag": 12, "special_token": 12,
                                         "over_budget": 12}
    assert not any(MARK in resp for g in ex.pool.groups() for resp in g.responses)
    assert [g.responses for g in ex.pool.groups()[:4]] == [honest(i) for i in range(4)]
    assert [g.rewards for g in ex.pool.groups()[:4]] == [[1.0, 0.0, 1.0, 0.0]] * 4

    spy = Spy(policy)
    drawn = ex.draw(3, 4, random.Random(0))
    assert len(drawn) == 4 and policy.train_step(drawn) is not None
    opened = "" if prefill else "<answer>"
    firsts = [int(g.question.answer) - 2 for g in drawn]
    expected = Counter(f"{opened}{a}{close}" for i in firsts for a, close in
                       ((i + 2, "</answer>"), (i + 9, "</answer>"), (i + 2, "</answer>"), (i + 9, "")))
    assert Counter(c.replace(" ", "") for c in spy.completions) == expected  # the tiny tokenizer's decode spaces words
    assert not any(MARK in c for c in spy.completions)


def test_a_peer_whose_answers_do_not_fit_never_becomes_established(tiny_model_dir):
    """The same number of useful bundles, one peer honest, one mixing in responses left out for a
    reason an honest model never gives: only the honest one is established."""
    policy = make_policy(tiny_model_dir, True)
    ex = node_exchange(policy)
    ex.standing.promotions_per_round = 10
    for r in range(8):
        ex.draw(r, 1, random.Random(r))  # this node's round r begins: the clock of probation
        ex.receive(signed_bundle(HONEST, SWARM, r, [fields(question(i), honest(i)) for i in range(2)]))
        ex.receive(signed_bundle(ATTACKER, SWARM, r, [fields(question(i), attack(i, True)) for i in range(2)]))
    ex.draw(8, 1, random.Random(8))
    assert ex.standing.is_established(HONEST.peer_id)
    assert not ex.standing.is_established(ATTACKER.peer_id)


def test_the_bar_leaves_out_far_completions_and_counts_them():
    near = Nearness(gap=1.0)
    near.start()
    assert near.keep([-9.0], ["p"], ["f"]) == [True] and not near.weighed  # no bar yet: nothing is weighed
    near.own([-1.0, -2.0])
    assert near.keep([-2.4, -2.6, -0.1], ["p", "p", "q"], ["f", "g", "f"]) == [True, False, True]
    assert near.weighed == {("p", "f"): (1, 0), ("p", "g"): (1, 1), ("q", "f"): (1, 0)}
    near.finish()
    near.start()  # a later update without own completions holds peers to the last bar
    assert near.keep([-2.6], ["p"], ["f"]) == [False] and near.bar == -1.5
    assert Nearness(gap=None).keep([-99.0], ["p"], ["f"]) == [True]


def test_the_update_weighs_peers_completions_against_its_own(tiny_model_dir):
    """With a gap of 0 a peer's completion stays in only if it is at least as likely, per token,
    as the node's own on average: the update's own log-probs decide, and the exchange counts it."""
    policy = make_policy(tiny_model_dir, True)
    policy.nearness.gap = 0.0
    ex = node_exchange(policy)
    q = question(1)
    gen = policy.generate([policy.prompt(q.question)], 4, max_new_tokens=6, temperature=1.0)
    local = Group(q, ["<answer>" + t for t in gen.texts[0]], [1.0, 0.0, 0.0, 0.0], token_ids=gen.token_ids[0])
    ex.receive(signed_bundle(HONEST, SWARM, 0, [fields(q, honest(1))]))
    peer = ex.draw(1, 1, random.Random(0))
    assert policy.train_step([local] + peer) is not None
    [(pair, (measured, far))] = policy.nearness.weighed.items()
    assert pair == (HONEST.peer_id, q.family) and measured == 4
    ex.judge_training(policy.nearness.weighed)
    row = next(r for r in ex.peer_rows() if r["peer_id"] == HONEST.peer_id)
    assert row["logprob_measured"] == 4 and row["left_out_by_reason"].get("far_from_policy", 0) == far


def _rounds(policy: Policy, key: Key, bundles, rounds: int, raw: bool = False) -> list[list[str]]:
    """``rounds`` rounds of the node: its own groups (real verifier) and J = 2 of the peer's,
    as the round takes them; ``raw`` trains on the peer's responses as sent (no exchange), the
    behaviour the rule replaces. Returns the node's own completions of each round."""
    ex, scorer, own = node_exchange(policy), Scorer(), []
    for r in range(rounds):
        torch.manual_seed(100 + r)
        qs = [question(20 + 2 * r + k) for k in range(2)]
        gen = policy.generate([policy.prompt(q.question) for q in qs], 4, max_new_tokens=8, temperature=1.0)
        own.append([t for texts in gen.texts for t in texts])
        tag = "<answer>" if policy.cfg.prefill_answer_tag else ""
        local = [Group(q, [tag + t for t in texts], [scorer.score(q, tag + t) for t in texts], token_ids=ids)
                 for q, texts, ids in zip(qs, gen.texts, gen.token_ids)]
        groups = [fields(question(i), responses) for i, responses in bundles(r)]
        if raw:
            external = [Group(question(i), responses, [scorer.score(question(i), x) for x in responses], source="p")
                        for i, responses in bundles(r)][:2]
        else:
            ex.receive(signed_bundle(key, SWARM, r, groups))
            external = ex.draw(r, 2, random.Random(r))
        train, _ = select_training_set(local, external, 2, 2, random.Random(r))
        policy.train_step(train)
        ex.judge_training(policy.nearness.weighed)
    return own


def _honest_bundles(r: int) -> list[tuple[int, list[str]]]:
    return [(i, honest(i)) for i in (2 * r, 2 * r + 1)]


@pytest.mark.parametrize("prefill", [True, False])
def test_beside_an_attacker_the_node_learns_what_it_learns_beside_an_honest_peer(tiny_model_dir, prefill):
    """Two rounds of the tiny model beside the attacker and, from the same start, beside an
    honest peer whose answers are the same: the updates are given the same tokens, so the
    adapters, the node's own completions and its rewards are identical, and none of its
    completions carries the marker. Trained on the attacker's responses as sent (the behaviour
    the rule replaces), the update is given the marker: the check can fail."""
    def attacked(r):
        return [(i, attack(i, prefill)) for i in (2 * r, 2 * r + 1)]

    beside_attacker, beside_honest, raw = (make_policy(tiny_model_dir, prefill) for _ in range(3))
    raw.nearness.gap = None  # the behaviour before the rule: no bound either
    own_a = _rounds(beside_attacker, ATTACKER, attacked, 2)
    own_h = _rounds(beside_honest, HONEST, _honest_bundles, 2)
    spy = Spy(raw)
    _rounds(raw, ATTACKER, attacked, 1, raw=True)
    assert own_a == own_h and not any(MARK in t for texts in own_a for t in texts)
    for a, h in zip(beside_attacker.params, beside_honest.params):
        assert torch.equal(a, h)
    assert any(MARK in c for c in spy.completions)


def test_left_out_responses_are_shown_in_metrics_and_the_peer_tables():
    rows = [{"peer_id": "12D3KooWPeerA", "name": "a", "left_out_by_reason": {"no_answer": 2, "far_from_policy": 1},
             "logprob_measured": 8},
            {"peer_id": "12D3KooWPeerB", "name": "b", "left_out_by_reason": {"no_answer": 1, "nested_tag": 4},
             "logprob_measured": 0},
            {"peer_id": "12D3KooWPeerC", "name": "c"}]
    values = metric_values(metrics_text(make_state(), FakeControl(rows)))
    assert values['swarmnode_peer_responses_left_out_total{reason="no_answer"}'] == 3
    assert values['swarmnode_peer_responses_left_out_total{reason="nested_tag"}'] == 4
    assert values['swarmnode_peer_responses_left_out_total{reason="far_from_policy"}'] == 1
    assert values["swarmnode_peer_completions_weighed_total"] == 8
    assert metric_values(metrics_text(make_state()))['swarmnode_peer_responses_left_out_total{reason=""}'] == 0
    lines = peer_table_lines(rows, now=0.0)
    at = lines[0].index("LEFT OUT")  # the columns are aligned: each cell starts under its heading
    assert [line[at:].split("  ")[0].strip() for line in lines[1:]] == ["3 (far 1/8)", "5", "-"]


@pytest.mark.parametrize("prefill", [True, False])
def test_the_token_limit_is_the_nodes_own_as_its_tokenizer_counts(tiny_model_dir, prefill):
    """A trained form fits when its completion (after the prompt's tag when prefilling) is at most
    twice ``max_new_tokens`` tokens of this node's tokenizer (and 4 more for short budgets: decoded
    text encodes again into more tokens than were sampled), counted or known short by its bytes."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    budget = TokenBudget(tok, 12, prefill)
    for n in range(50):
        for answer in ("7" * n, "ab " * n, "é" * n):
            form = f"<answer>{answer}</answer>"
            completion = form[len("<answer>"):] if prefill else form
            fits = len(tok.encode(completion, add_special_tokens=False)) <= 24
            assert (budget.check(form, answer) is None) == fits, (answer, fits)
