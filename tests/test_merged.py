"""Sampling with the adapter merged into the weights: the same model while merged, the very
same weights after, on every catalogue architecture."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import swarmnode.train.policy as policy_module
from swarmnode.config import NodeConfig
from swarmnode.train.merged import adapter_merged, merges_on
from swarmnode.train.model import load_base_model
from swarmnode.train.policy import Policy
from tinymodel import ARCHITECTURES, TEST_DEVICE, build_tiny_model


@pytest.fixture(scope="module", params=ARCHITECTURES)
def policy(request, tmp_path_factory):
    base = load_base_model(str(build_tiny_model(tmp_path_factory.mktemp(request.param), arch=request.param)),
                           torch.device(TEST_DEVICE))
    pol = Policy(base, replace(NodeConfig(), lora_r=4, lora_alpha=8))
    torch.manual_seed(0)
    with torch.no_grad():  # a trained adapter: the zero-initialised one would merge as nothing
        for p in pol.params:
            p.normal_(0, 0.05)
    pol.model.eval()
    return pol


def _logits(policy) -> torch.Tensor:
    ids = policy.tokenizer(policy.prompt("Calculate 1 + 2."), add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        return policy.model(input_ids=ids["input_ids"].to(policy.device)).logits.float()


def test_merged_computes_the_same_and_leaves_the_weights_exactly_as_they_were(policy):
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    plain = _logits(policy)
    with adapter_merged(policy.model):
        merged = _logits(policy)
        adapted = [n for n, p in policy.model.named_parameters() if "base_layer.weight" in n
                   and not torch.equal(p, before[n])]
    assert adapted, "nothing was merged"
    assert torch.allclose(merged, plain, atol=1e-4)
    assert all(torch.equal(p, before[n]) for n, p in policy.model.named_parameters())
    assert torch.equal(_logits(policy), plain)  # the adapter applies apart again


def test_a_disabled_merge_changes_nothing(policy):
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    with adapter_merged(policy.model, enabled=False):
        assert all(torch.equal(p, before[n]) for n, p in policy.model.named_parameters())


def test_sampling_merges_on_cuda_only_and_merged_greedy_rows_equal_unmerged(policy, monkeypatch):
    assert merges_on(torch.device("cuda")) and not merges_on(torch.device("cpu"))
    prompts = [policy.prompt("Calculate 1 + 2."), policy.prompt("x")]
    plain = policy.generate(prompts, 2, max_new_tokens=8, temperature=1e-4)
    monkeypatch.setattr(policy_module, "merges_on", lambda device: True)
    merged = policy.generate(prompts, 2, max_new_tokens=8, temperature=1e-4)
    assert merged.token_ids == plain.token_ids
