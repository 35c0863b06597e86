"""The chunked chosen-token log-prob equals log_softmax + gather, in value and gradient."""

from dataclasses import replace

import pytest
import torch

import swarmnode.train.logprob as logprob
import swarmnode.train.policy as policy_module
from swarmnode.config import NodeConfig
from swarmnode.train.logprob import chosen_logprobs
from swarmnode.train.model import load_base_model
from swarmnode.train.policy import Policy


def _reference(hidden, weight, targets):
    return torch.log_softmax(hidden @ weight.T, dim=-1).gather(-1, targets[:, None])[:, 0]


@pytest.mark.parametrize("chunk", [1, 3, 256])
def test_value_and_gradient_match_full_logits(monkeypatch, chunk):
    monkeypatch.setattr(logprob, "CHUNK_TOKENS", chunk)
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(50, 8, generator=g, dtype=torch.float64)
    targets = torch.randint(0, 50, (7,), generator=g)
    grad_out = torch.randn(7, generator=g, dtype=torch.float64)
    h1 = torch.randn(7, 8, generator=g, dtype=torch.float64, requires_grad=True)
    h2 = h1.detach().clone().requires_grad_(True)
    fast, ref = chosen_logprobs(h1, weight, targets), _reference(h2, weight, targets)
    (fast * grad_out).sum().backward()
    (ref * grad_out).sum().backward()
    assert torch.allclose(fast.double(), ref, atol=1e-5)
    assert torch.allclose(h1.grad, h2.grad, atol=1e-5)


def test_gradcheck():
    weight = torch.randn(20, 4, dtype=torch.float64)
    targets = torch.tensor([0, 5, 19])
    hidden = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda h: chosen_logprobs(h, weight, targets), (hidden,), atol=1e-4)


def test_trainable_output_layer_is_refused():
    with pytest.raises(ValueError, match="frozen"):
        chosen_logprobs(torch.randn(2, 4), torch.randn(5, 4, requires_grad=True), torch.tensor([0, 1]))


def _reference_logp(policy, prompt, completion):
    """Log-probs of ``completion`` from one plain forward of prompt + completion with full logits."""
    ids = torch.tensor([prompt + completion])
    logits = policy.model(input_ids=ids, use_cache=False).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


@pytest.mark.parametrize("plain_head,checkpoint,attention", [(True, False, "sdpa"), (False, False, "sdpa"),
                                                              (True, True, "sdpa"), (True, True, "eager")])
def test_shared_prompt_logp_matches_separate_forwards(tiny_model_dir, monkeypatch, plain_head, checkpoint, attention):
    base = load_base_model(str(tiny_model_dir), torch.device("cpu"))
    # Eager attention's explicit mask fails loudly if a replayed prompt layer sees other keys.
    base.model.set_attn_implementation(attention)
    policy = Policy(base, replace(NodeConfig(), lora_r=4, lora_alpha=8))
    with torch.no_grad():  # a non-zero adapter, so LoRA is part of what is compared
        for p in policy.params:
            p.normal_(0, 0.05)
    assert policy._plain_output_layer() is not None
    if not plain_head:
        monkeypatch.setattr(Policy, "_plain_output_layer", lambda self: None)
    recomputed = []
    if checkpoint:
        monkeypatch.setattr(policy_module, "CHECKPOINT_ABOVE_TOKENS", 0)
        real_checkpoint = torch.utils.checkpoint.checkpoint
        monkeypatch.setattr(torch.utils.checkpoint, "checkpoint",
                            lambda *a, **kw: recomputed.append(1) or real_checkpoint(*a, **kw))
        policy.model.train()
    tok = policy.tokenizer
    prompt = tok(policy.prompt("Calculate 1 + 2."), add_special_tokens=False)["input_ids"]
    completions = [tok(t, add_special_tokens=False)["input_ids"] for t in ("3</answer>", "4", "0123 abc</answer>")]
    logp, mask = policy._shared_prompt_logp(prompt, completions)
    assert mask.sum(dim=1).tolist() == [len(c) for c in completions]
    assert len(recomputed) == (4 if checkpoint else 0)  # the tiny model's two layers, in both passes
    (logp * mask).sum().backward()
    shared_grads = [p.grad.clone() for p in policy.params]
    policy.optimizer.zero_grad()
    refs = [_reference_logp(policy, prompt, c) for c in completions]
    sum(r.sum() for r in refs).backward()
    for lp, m, ref in zip(logp, mask, refs):
        assert torch.allclose(lp[m.bool()], ref, atol=1e-4)
    for a, p in zip(shared_grads, policy.params):
        assert torch.allclose(a, p.grad, atol=1e-5, rtol=1e-3)
    assert any(a.abs().sum() > 0 for a in shared_grads)
