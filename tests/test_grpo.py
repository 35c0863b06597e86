import random
from types import SimpleNamespace

import pytest
import torch

from swarmnode.config import NodeConfig
from swarmnode.node.round import select_training_set
from swarmnode.records import Group, Question
from swarmnode.train.grpo import group_advantages, grpo_loss
from swarmnode.train.model import BaseModel, load_base_model
from swarmnode.train.policy import MICRO_BATCH_TOKENS, Policy
from tinymodel import TEST_DEVICE


def test_advantages_are_normalised_within_each_group():
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 3.0]]))
    assert torch.allclose(adv[0], torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-4)
    assert torch.equal(adv[1], torch.zeros(4))
    assert torch.allclose(adv.mean(-1), torch.zeros(3), atol=1e-5)
    assert adv[2, 3] > 0 > adv[2, 0]


def test_loss_is_clipped_asymmetrically():
    mask = torch.ones(1, 1)
    pos, neg = torch.tensor([1.0]), torch.tensor([-1.0])
    up = torch.log(torch.tensor([[2.0]]))
    down = torch.log(torch.tensor([[0.5]]))
    zero = torch.zeros(1, 1)
    # Positive advantage: the ratio's gain is capped at 1 + eps_high.
    assert grpo_loss(up, zero, pos, mask, 0.2, 0.28, 1).item() == pytest.approx(-1.28)
    # Negative advantage: the ratio's drop is capped at 1 - eps_low.
    assert grpo_loss(down, zero, neg, mask, 0.2, 0.28, 1).item() == pytest.approx(0.8)
    # Token-level averaging: the normaliser is the batch's token count.
    assert grpo_loss(zero, zero, pos, mask, 0.2, 0.28, 4).item() == pytest.approx(-0.25)


def _group(rewards, source="local"):
    return Group(Question("basic_arithmetic", "Calculate 1 + 1.", "2"), ["<answer>x"] * len(rewards),
                 list(rewards), source=source)


def test_training_set_drops_zero_advantage_and_fills_from_local():
    local = [_group([0, 1]), _group([0, 0]), _group([1, 1]), _group([0, 0.5]), _group([1, 0])]
    ext = [_group([0, 1], source="peerA")]
    train, dropped = select_training_set(local, ext, 2, 2, random.Random(0))
    assert dropped == 2
    assert sum(g.is_local for g in train) == 3 and sum(not g.is_local for g in train) == 1
    assert all(g.has_signal() for g in train)
    train, _ = select_training_set(local, [], 4, 0, random.Random(0))
    assert len(train) == 3 and all(g.is_local for g in train)


@pytest.fixture()
def policy(tiny_model_dir):
    torch.manual_seed(0)
    cfg = NodeConfig(lora_r=4, lora_alpha=8, learning_rate=0.01, micro_batch=2, max_grad_norm=0.0)
    return Policy(load_base_model(str(tiny_model_dir), torch.device(TEST_DEVICE)), cfg)


@pytest.fixture()
def bf16_policy(tiny_model_dir):
    torch.manual_seed(0)
    cfg = NodeConfig(lora_r=4, lora_alpha=8, learning_rate=0.01, micro_batch=2, max_grad_norm=0.0)
    return Policy(load_base_model(str(tiny_model_dir), torch.device(TEST_DEVICE), torch.bfloat16), cfg)


def first_token_logprobs(policy: Policy, question: str, responses: list[str]) -> list[float]:
    """The log-prob of each response's first token under the policy, by a plain forward pass."""
    policy.activate()
    policy.model.eval()
    out = []
    with torch.no_grad():
        for response in responses:
            prompt, completion = policy.split_response(question, response)
            p = policy.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            c = policy.tokenizer(completion, add_special_tokens=False)["input_ids"]
            logits = policy.model(input_ids=torch.tensor([p + c[:1]], device=policy.device)).logits[0, len(p) - 1]
            out.append(torch.log_softmax(logits.float(), dim=-1)[c[0]].item())
    return out


def test_grpo_step_raises_the_higher_advantage_completion(policy):
    q = Question("basic_arithmetic", "Calculate 1 + 1.", "2")
    good, bad = "<answer>2</answer>", "<answer>7</answer>"
    group = Group(q, [good, bad, good, bad], [1.0, 0.0, 1.0, 0.0])
    # The first response token is where the two differ ("2" vs "7", same context).
    before = first_token_logprobs(policy, q.question, [good, bad])
    frozen = {n: p.clone() for n, p in policy.model.named_parameters() if not p.requires_grad}
    loss = policy.train_step([group])
    after = first_token_logprobs(policy, q.question, [good, bad])
    assert loss is not None
    assert after[0] > before[0] and after[1] < before[1]
    # Only the adapter trains: every frozen base weight is bit-identical.
    assert all(torch.equal(p, frozen[n]) for n, p in policy.model.named_parameters() if n in frozen)


def test_a_bf16_base_trains_an_fp32_adapter_and_agrees_with_fp32(policy, bf16_policy):
    """Frozen weights in bf16 (the dtype setting's bfloat16, and auto on CUDA): the
    adapter still trains in fp32, and the log-probs stay within bf16's rounding of fp32's."""
    assert all(p.dtype == torch.float32 for p in bf16_policy.params)
    assert {p.dtype for p in bf16_policy.model.parameters() if not p.requires_grad} == {torch.bfloat16}
    q = Question("basic_arithmetic", "Calculate 1 + 1.", "2")
    good, bad = "<answer>2</answer>", "<answer>7</answer>"
    before, exact = first_token_logprobs(bf16_policy, q.question, [good, bad]), first_token_logprobs(
        policy, q.question, [good, bad])
    assert before == pytest.approx(exact, abs=0.1)
    assert bf16_policy.train_step([Group(q, [good, bad, good, bad], [1.0, 0.0, 1.0, 0.0])]) is not None
    after = first_token_logprobs(bf16_policy, q.question, [good, bad])
    assert after[0] > before[0] and after[1] < before[1]


def test_the_loss_is_the_token_mean_over_every_completion_of_the_batch(policy):
    """N counts every response token of the batch, a zero-advantage completion's too: it adds
    nothing to the sum (ratio 1 in value, so the loss is -sum A_i |o_i| / N)."""
    q = Question("chain_sum", "What is 1 + 1?", "2")
    ids = [[11, 12, 13], [14, 15, 16, 17, 18], [19, 20]]
    group = Group(q, ["a", "b", "c"], [0.0, 0.5, 1.0], token_ids=ids)
    adv = group_advantages(torch.tensor([group.rewards]))[0]
    assert adv[1] == 0.0 and adv[2] > 0
    assert policy.train_step([group]) == pytest.approx(-(adv[0] * 3 + adv[2] * 2).item() / 10, rel=1e-5)
    assert policy.train_step([Group(q, ["a", "b"], [1.0, 1.0], token_ids=ids[:2])]) is None  # nothing to learn


def sequence_logprobs(policy: Policy, prompt_ids: list[int], completions: list[list[int]]) -> list[tuple[float, int]]:
    """Each completion's summed token log-prob and its length, by a plain forward pass."""
    policy.activate()
    policy.model.eval()
    out = []
    with torch.no_grad():
        for c in completions:
            logits = policy.model(input_ids=torch.tensor([prompt_ids + c], device=policy.device)).logits[0]
            logp = torch.log_softmax(logits.float(), dim=-1)
            out.append((sum(logp[len(prompt_ids) - 1 + t, tok].item() for t, tok in enumerate(c)), len(c)))
    return out


def test_the_update_keeps_each_groups_mean_token_logprob_before_it(policy):
    """last_logprobs: per group of the step, the mean log-prob per token of its completions with
    advantage under the policy before the update (what the experiment compares a peer's groups
    with its own by); None for a group none of whose completions had advantage."""
    q = Question("chain_sum", "What is 1 + 1?", "2")
    prompt = policy.tokenizer(policy.prompt(q.question), add_special_tokens=False)["input_ids"]
    ids = [[11, 12, 13], [14, 15, 16, 17, 18], [19, 20], [21, 22, 23, 24]]
    signal = Group(q, ["a", "b", "c", "d"], [0.0, 0.5, 1.0, 0.5], token_ids=ids)  # b and d: zero advantage
    flat = Group(q, ["a", "b"], [1.0, 1.0], token_ids=ids[:2])
    pairs = sequence_logprobs(policy, prompt, [ids[0], ids[2]])
    expected = sum(lp for lp, _ in pairs) / sum(n for _, n in pairs)
    policy.train_step([signal, flat])
    (g1, lp1), (g2, lp2) = policy.last_logprobs
    assert g1 is signal and g2 is flat and lp2 is None
    assert lp1 == pytest.approx(expected, abs=1e-4) and lp1 < 0
    policy.train_step([flat])  # nothing to learn: the record is still this step's
    assert policy.last_logprobs == [(flat, None)]


def test_free_heap_is_returned_after_every_micro_batch(policy, monkeypatch):
    from swarmnode.train import policy as policy_module

    trims = []
    monkeypatch.setattr(policy_module, "release_free_memory", lambda: trims.append(1))
    q = Question("chain_sum", "What is 1 + 1?", "2")
    group = Group(q, ["a", "b", "c"], [0.0, 0.5, 1.0], token_ids=[[11, 12, 13], [14, 15, 16, 17, 18], [19, 20]])
    batches = policy._micro_batches(policy._encode_pairs([(policy.prompt(q.question), ids)
                                                          for ids in group.token_ids]), [0, 2])
    assert policy.train_step([group]) is not None
    assert len(trims) == len(batches) + 1  # after each micro-batch, and after the update


def test_advantages_use_the_population_standard_deviation():
    adv = group_advantages(torch.tensor([[0.0, 1.0]]))[0]
    assert adv.tolist() == pytest.approx([-1.0, 1.0], abs=1e-5)  # the sample one would give -0.71, 0.71


def test_two_adapters_on_one_base_train_independently(policy):
    base = BaseModel(policy.model, policy.tokenizer, "tiny", policy.device, torch.float32)
    other = Policy(base, policy.cfg, adapter="b", shared=policy)
    q = Question("basic_arithmetic", "Calculate 1 + 1.", "2")
    before = {n: p.clone() for n, p in policy.model.named_parameters() if ".b." in n}
    policy.train_step([Group(q, ["<answer>2</answer>", "<answer>3</answer>"], [1.0, 0.0])])
    assert all(torch.equal(p, before[n]) for n, p in policy.model.named_parameters() if ".b." in n)
    assert other.generate([other.prompt(q.question)], 2, max_new_tokens=4, temperature=1.0).tokens > 0


def test_generate_returns_n_responses_per_prompt(policy):
    gen = policy.generate([policy.prompt("Calculate 1 + 1."), policy.prompt("Calculate 2 + 2.")], 3,
                          max_new_tokens=5, temperature=1.0)
    assert [len(t) for t in gen.texts] == [3, 3]
    assert 0 < gen.tokens <= 2 * 3 * 5
    assert all(len(ids) <= 5 for row in gen.token_ids for ids in row)


def test_micro_batches_share_a_prompt_and_cap_sequences_and_padded_tokens():
    lengths_a = [10, 300, 100, 5, 600, 2000]
    seqs = [([1, 2], [7] * n) for n in lengths_a] + [([3], [7] * 8) for _ in range(5)]
    owner = SimpleNamespace(cfg=NodeConfig(micro_batch=4))
    batches = Policy._micro_batches(owner, seqs, range(len(seqs)))
    assert sorted(i for b in batches for i in b) == list(range(len(seqs)))
    for b in batches:
        assert len({tuple(seqs[i][0]) for i in b}) == 1 and len(b) <= 4
        assert len(b) == 1 or len(b) * max(len(seqs[i][1]) for i in b) <= MICRO_BATCH_TOKENS
    assert [[len(seqs[i][1]) for i in b] for b in batches] == [[5, 10, 100], [300], [600], [2000], [8] * 4, [8]]


def test_the_micro_batch_cap_changes_the_grouping_not_the_update(tiny_model_dir, monkeypatch):
    from swarmnode.train import policy as policy_module

    rng = random.Random(0)
    lengths = [[256, 256, 140, 90, 60, 40, 30, 20], [130, 120, 110, 100, 90, 80, 70, 60]]
    results = []
    for cap in (1024, 512):
        monkeypatch.setattr(policy_module, "MICRO_BATCH_TOKENS", cap)
        torch.manual_seed(0)
        policy = Policy(load_base_model(str(tiny_model_dir), torch.device(TEST_DEVICE)),
                        NodeConfig(lora_r=4, lora_alpha=8, learning_rate=0.01))
        rng.seed(0)
        vocab = policy.model.config.vocab_size
        groups = [Group(Question("basic_arithmetic", f"Calculate {g} + 1.", str(g + 1)), ["x"] * 8,
                        [rng.random() for _ in range(8)],
                        token_ids=[[rng.randrange(5, vocab) for _ in range(n)] for n in lens])
                  for g, lens in enumerate(lengths)]
        seqs = policy._encode_pairs([(policy.prompt(g.question.question), ids) for g in groups for ids in g.token_ids])
        loss = policy.train_step(groups)
        results.append((len(policy._micro_batches(seqs, range(len(seqs)))), loss,
                        torch.cat([p.detach().flatten() for p in policy.params])))
    (n_wide, loss_wide, params_wide), (n_narrow, loss_narrow, params_narrow) = results
    assert n_narrow > n_wide  # the groups really were split differently
    assert loss_narrow == pytest.approx(loss_wide, rel=1e-6)
    assert torch.allclose(params_narrow, params_wide, rtol=0, atol=1e-6)
