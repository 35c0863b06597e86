"""The chunked chosen-token log-prob equals log_softmax + gather, in value and gradient.

The shared-prompt training pass is checked on a tiny random model of every catalogue
architecture (``tests/tinymodel.py``): Llama, Qwen2 (grouped-query attention, an output
layer apart from the embedding, a padded vocabulary) and Gemma 3 (sliding windows shorter
than the prompt, so the completion pass sees only the prompt's last window).
"""

from dataclasses import replace

import pytest
import torch

import swarmnode.train.logprob as logprob
import swarmnode.train.policy as policy_module
from swarmnode.config import NodeConfig
from swarmnode.train.logprob import chosen_logprobs
from swarmnode.train.model import load_base_model
from swarmnode.train.policy import Policy
from tinymodel import ARCHITECTURES, TEST_DEVICE, build_tiny_model


def _reference(hidden, weight, targets):
    return torch.log_softmax(hidden @ weight.T, dim=-1).gather(-1, targets[:, None])[:, 0]


@pytest.mark.parametrize("chunk", [1, 3, 256])
def test_value_and_gradient_match_full_logits(monkeypatch, chunk):
    monkeypatch.setattr(logprob, "CHUNK_LOGITS", chunk * 50)
    assert logprob.chunk_tokens(50) == chunk
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
    ids = torch.tensor([prompt + completion], device=policy.device)
    logits = policy.model(input_ids=ids, use_cache=False).logits[0, len(prompt) - 1:-1].float()
    chosen = torch.tensor(completion, device=policy.device)[:, None]
    return torch.log_softmax(logits, dim=-1).gather(-1, chosen)[:, 0]


@pytest.fixture(scope="module", params=ARCHITECTURES)
def arch_dir(request, tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp(request.param), arch=request.param)


@pytest.mark.parametrize("plain_head,checkpoint,attention", [(True, False, "sdpa"), (False, False, "sdpa"),
                                                              (True, True, "sdpa"), (True, True, "eager")])
def test_shared_prompt_logp_matches_separate_forwards(arch_dir, monkeypatch, plain_head, checkpoint, attention):
    base = load_base_model(str(arch_dir), torch.device(TEST_DEVICE))
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
    layers = policy.model.config.num_hidden_layers
    assert len(recomputed) == (2 * layers if checkpoint else 0)  # every layer, in both passes
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


def test_soft_capped_logits_take_the_full_logits_path_and_say_so(tmp_path, caplog, monkeypatch):
    """A model whose logits are not ``hidden @ weight.T`` (Gemma's optional final soft-cap)."""
    import logging

    from swarmnode.train import fallback

    monkeypatch.setattr(fallback, "_reported", set())
    caplog.set_level(logging.INFO, logger="swarmnode.train")
    base = load_base_model(str(build_tiny_model(tmp_path, arch="gemma3", final_logit_softcapping=0.5)),
                           torch.device(TEST_DEVICE))
    policy = Policy(base, replace(NodeConfig(), lora_r=4, lora_alpha=8))
    assert policy._plain_output_layer() is None and policy._plain_output_layer() is None
    assert [r.getMessage() for r in caplog.records].count(
        "gemma3_text model: log-probs from full-vocabulary logits (more memory), "
        "because its logits are soft-capped") == 1
    tok = policy.tokenizer
    prompt = tok(policy.prompt("Calculate 1 + 2."), add_special_tokens=False)["input_ids"]
    completion = tok("0123 abc</answer>", add_special_tokens=False)["input_ids"]
    logp, _ = policy._shared_prompt_logp(prompt, [completion])
    ref = _reference_logp(policy, prompt, completion)
    assert torch.allclose(logp[0], ref, atol=1e-5)
