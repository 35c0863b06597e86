"""GRPO, as the SAPO paper uses it: group-normalised advantages, clipped ratio, no KL.

For question q with responses o_1..o_G and rewards r_1..r_G:

    A_i       = (r_i - mean(r)) / (std(r) + eps)                       (same A for every token of o_i)
    ratio_i,t = pi_theta(o_i,t | q, o_i,<t) / pi_old(o_i,t | q, o_i,<t)
    L         = -1/N * sum_i sum_t min(ratio_i,t * A_i, clip(ratio_i,t, 1 - eps_low, 1 + eps_high) * A_i)

where the sums run over every completion of the training batch (all its questions) and N is
the number of their response tokens, a completion with zero advantage included (it adds
nothing to the sum and still counts in N): the token-level mean of DAPO; asymmetric
clipping (eps_low 0.2, eps_high 0.28); beta = 0: no reference model, no KL term. std is the
population standard deviation (dividing by G), so a group's advantages have unit variance
whatever its size: a peer's group of 4 completions weighs per completion as a local group of
8. With one update per round pi_old is the current policy detached, so ratio = 1 in value
and the gradient is A_i * grad log pi_theta; the clip matters once updates are reused.

What the paper uses: its text (arXiv 2509.08721) names GRPO without a KL penalty and gives
no loss of its own; its open-source implementation (Gensyn's GenRL,
``GRPOLanguageTrainerModule``) takes this token-level mean over the batch's completion
tokens, the same clipping (0.2, 0.28), and the sample standard deviation (torch's default,
dividing by G - 1), which makes each advantage sqrt((G - 1) / G) of this one (0.94 at G = 8):
a constant factor for groups of one size, which AdamW's normalised step all but cancels.
"""

from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Normalise rewards [G, L] within each group (row) by its mean and population standard
    deviation; a row of equal rewards gives zeros."""
    mean = rewards.mean(dim=-1, keepdim=True)
    std = rewards.std(dim=-1, unbiased=False, keepdim=True)
    return (rewards - mean) / (std + eps)


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              eps_low: float, eps_high: float, n_tokens: int | float) -> torch.Tensor:
    """The clipped surrogate of the module docstring for one micro-batch.

    logp, old_logp, mask: [B, T] per response token (mask 1 on real tokens); advantages: [B].
    ``n_tokens`` is N, the response tokens of every completion in the whole batch, so that
    summing this loss over micro-batches gives the token-level mean over the batch.
    """
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(-1)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)
    return -(surrogate * mask).sum() / n_tokens
