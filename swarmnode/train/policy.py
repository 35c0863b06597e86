"""The policy: a frozen base model plus one trainable PEFT LoRA adapter.

It samples responses, computes per-token log-probabilities of given responses, and takes
one GRPO step. Memory matters on laptops: log-probs are computed only for the response
tokens (``logits_to_keep``) and in micro-batches, so no more than one micro-batch of
full-vocabulary logits ever exists at once.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence, cast

import torch

from swarmnode.compat.transformers import adapter_parameters, checkpointable, checkpointing_with_cache
from swarmnode.config import NodeConfig
from swarmnode.records import LOCAL, Group
from swarmnode.train.answers import ANSWER_CLOSE, ANSWER_OPEN
from swarmnode.train.fallback import fell_back
from swarmnode.train.grpo import group_advantages, grpo_loss
from swarmnode.train.kvcache import prefix_cache, prompt_cache
from swarmnode.train.logprob import chosen_logprobs
from swarmnode.train.memtrim import large_blocks_mmapped, release_free_memory
from swarmnode.train.merged import adapter_merged, merges_on
from swarmnode.train.model import BaseModel
from swarmnode.train.nearness import Nearness
from swarmnode.train.sampler import TokenTexts, end_ids, sample
from swarmnode.train.tasks import build_prompt

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)

DEFAULT_ADAPTER = "default"
# Tokens (prompt plus completions) of one training micro-batch above which layer activations
# are recomputed. Stored, they take ~1.4 MB a token (SmolLM2-135M): at 256, a 202-token
# micro-batch of the laptop set peaked 220 MB above every checkpointed one
# (docs/performance.md, training: activation checkpointing).
CHECKPOINT_ABOVE_TOKENS = 64
# Padded completion tokens of one micro-batch at most: 8 x 256 tokens peaked 210 MB higher
# than 4 x 256 (docs/performance.md, training: micro-batch size).
MICRO_BATCH_TOKENS = 1024


@dataclass
class Generation:
    """Responses for each prompt (generated text only, without the prompt) and token counts."""

    texts: list[list[str]]
    token_ids: list[list[list[int]]]
    tokens: int


class Policy:
    """One node's policy. Several policies may share one base model (``shared=``), each with
    its own adapter and optimizer: the experiment runs N nodes on one copy of the weights.
    Every method activates this policy's adapter before touching the model."""

    def __init__(self, base: BaseModel, cfg: NodeConfig, adapter: str = DEFAULT_ADAPTER,
                 shared: "Policy | None" = None):
        from peft import LoraConfig, get_peft_model

        self.cfg = cfg
        self.adapter = adapter
        self.tokenizer = base.tokenizer
        self.device = base.device
        self.model_name = base.name
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=list(cfg.lora_target_modules), task_type="CAUSAL_LM")
        try:
            if shared is None:
                self.model = get_peft_model(base.model, lora, adapter_name=adapter)
            else:
                self.model = shared.model
                self.model.add_adapter(adapter, lora)
        except ValueError as exc:
            raise ValueError(f"lora_target_modules {cfg.lora_target_modules} do not fit this model: {exc}") from None
        self.params = adapter_parameters(self.model, adapter)
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        pad = self.tokenizer.pad_token_id
        if not isinstance(pad, int):  # load_base_model gives every tokenizer one
            raise ValueError("the tokenizer has no pad token: load the model with swarmnode.train.model")
        self._pad = pad
        self._ends = end_ids(base.model, self.tokenizer)
        self._token_texts: TokenTexts | None = shared._token_texts if shared is not None else None
        # The bound on peers' completions' distance from this policy; its counts are the last update's.
        self.nearness = Nearness(cfg.peer_logprob_gap)
        # The groups of the latest train_step, each with the mean log-prob per token of its
        # completions that carried advantage, under the policy before that step (None when none
        # did): how far a group, a peer's especially, is from this policy. Costs nothing: the
        # update computes these log-probs anyway.
        self.last_logprobs: list[tuple[Group, float | None]] = []

    def activate(self) -> None:
        """Make this policy's adapter the active (and only trainable) one."""
        if self.model.active_adapter != self.adapter:
            self.model.set_adapter(self.adapter)

    # ---- prompts -----------------------------------------------------------------------
    def prompt(self, question: str, prefill: bool | None = None) -> str:
        return build_prompt(self.tokenizer, question, self.cfg.prefill_answer_tag if prefill is None else prefill)

    def split_response(self, question: str, response: str) -> tuple[str, str]:
        """(prompt text, completion text) under which this policy scores a full response.

        A response that starts with the prefilled tag is scored after a prompt that ends
        with it, whatever the sender's settings were, so every token is the model's own.
        """
        if self.cfg.prefill_answer_tag and response.startswith(ANSWER_OPEN):
            return self.prompt(question, True), response[len(ANSWER_OPEN):]
        return self.prompt(question, False), response

    # ---- sampling ----------------------------------------------------------------------
    @property
    def token_texts(self) -> TokenTexts:
        """Every vocabulary id's text, decoded on first use, for the sampler's stop-string check."""
        if self._token_texts is None:
            self._token_texts = TokenTexts(self.tokenizer, self.model.get_output_embeddings().weight.shape[0])
        return self._token_texts

    @torch.no_grad()
    def generate(self, prompts: Sequence[str], n: int, *, max_new_tokens: int, temperature: float,
                 should_stop: Callable[[], bool] = lambda: False) -> Generation:
        """Sample ``n`` responses per prompt in one batch, each ending at ``</answer>`` or EOS.

        See :mod:`swarmnode.train.sampler` for why this is not ``model.generate``.
        """
        self.activate()
        self.model.eval()
        with adapter_merged(self.model, merges_on(self.device)):
            rows = sample(self.model, self.tokenizer, prompts, n, max_new_tokens=max_new_tokens,
                          temperature=temperature, stop_string=ANSWER_CLOSE, eos_ids=self._ends,
                          token_texts=self.token_texts, device=self.device, should_stop=should_stop)
        release_free_memory()
        ids = [rows[i * n:(i + 1) * n] for i in range(len(prompts))]
        texts = [self.tokenizer.batch_decode(group, skip_special_tokens=True) for group in ids]
        return Generation(texts, ids, sum(len(row) for row in rows))

    # ---- log-probs and the update ------------------------------------------------------
    def _encode_pairs(self, pairs: Sequence[tuple[str, str | list[int]]]) -> list[tuple[list[int], list[int]]]:
        out = []
        for prompt, completion in pairs:
            p_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            c_ids = completion if isinstance(completion, list) else \
                self.tokenizer(completion, add_special_tokens=False)["input_ids"]
            out.append((p_ids, c_ids))
        return out

    def _micro_batches(self, seqs: list[tuple[list[int], list[int]]], indices: Sequence[int]) -> list[list[int]]:
        """``indices`` of ``seqs`` in micro-batches whose sequences share one prompt.

        The completions of a question group share their prompt, so each micro-batch runs
        that prompt once; within a prompt, completions are sorted by length so little
        padding is wasted. A micro-batch holds at most ``cfg.micro_batch`` sequences and,
        padded to its longest, at most ``MICRO_BATCH_TOKENS`` completion tokens (one
        sequence at least): long completions cost a repeated prompt pass, not a higher peak.
        """
        by_prompt: dict[tuple[int, ...], list[int]] = {}
        for i in indices:
            by_prompt.setdefault(tuple(seqs[i][0]), []).append(i)
        batches: list[list[int]] = []
        for members in by_prompt.values():
            members.sort(key=lambda i: len(seqs[i][1]))
            batch: list[int] = []
            for i in members:
                if batch and (len(batch) == self.cfg.micro_batch
                              or (len(batch) + 1) * len(seqs[i][1]) > MICRO_BATCH_TOKENS):
                    batches.append(batch)
                    batch = []
                batch.append(i)
            batches.append(batch)
        return batches

    def _shared_prompt_logp(self, prompt: list[int], completions: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs [B, K] of ``completions`` after one ``prompt`` (left-aligned, mask [B, K]).

        The prompt runs once; its keys and values, broadcast to every completion through a
        read-only :func:`prefix_cache`, carry gradients back into it. Only completion tokens
        get output states, and with a plain output layer only the chosen tokens' log-probs
        are formed (:func:`chosen_logprobs`). In training, a micro-batch of more than
        ``CHECKPOINT_ABOVE_TOKENS`` tokens, prompt and completions, keeps only each layer's
        input and recomputes the rest in the backward pass (activations are ~1.4 MB a token
        for SmolLM2-135M otherwise).
        """
        b, k, n_prompt, dev = len(completions), max(len(c) for c in completions), len(prompt), self.device
        ids = torch.full((b, k), self._pad, dtype=torch.long)
        mask = torch.zeros((b, k))
        for i, c in enumerate(completions):
            ids[i, :len(c)] = torch.tensor(c, dtype=torch.long)
            mask[i, :len(c)] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        head = self._plain_output_layer()
        # With a plain head the decoder's hidden states suffice; otherwise the model's logits.
        net = self._base_model().get_decoder() if head is not None else self.model
        extra = {} if head is not None else {"logits_to_keep": 1}
        cache = prompt_cache()
        # The layers use the given caches whatever use_cache says; False only tells
        # transformers to create none (else it warns under checkpointing).
        with self._checkpointing(self.model.training and n_prompt + b * (k - 1) > CHECKPOINT_ABOVE_TOKENS):
            out = net(input_ids=torch.tensor([prompt], device=dev), past_key_values=cache, use_cache=False, **extra)
            states = [(out.last_hidden_state if head is not None else out.logits)[:, -1:].expand(b, -1, -1)]
            if k > 1:
                attn = torch.cat([mask.new_ones((b, n_prompt)), mask[:, :k - 1]], dim=1).long()
                positions = torch.arange(n_prompt, n_prompt + k - 1, device=dev).expand(b, -1)
                out = net(input_ids=ids[:, :k - 1], attention_mask=attn, position_ids=positions,
                          past_key_values=prefix_cache(cache), use_cache=False)
                states.append(out.last_hidden_state if head is not None else out.logits)
        del out
        states_t = torch.cat(states, dim=1)  # position j predicts completion token j
        if head is None:
            return torch.log_softmax(states_t.float(), dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1), mask
        real = mask.bool()
        chosen = chosen_logprobs(states_t[real], head.weight, ids[real])
        return torch.zeros_like(mask).masked_scatter(real, chosen), mask

    @contextlib.contextmanager
    def _checkpointing(self, on: bool):
        """Activation checkpointing of the decoder layers inside the block, when ``on`` and the
        model's layers allow it (else the log says so, once).

        The layers may keep their cache under checkpointing because the caches they see
        (:func:`prompt_cache`, :func:`prefix_cache`) give a replayed layer the inputs of its
        first run.
        """
        if on and not checkpointable(self.model):
            fell_back(self.model.config, "training keeps every layer's activations (more memory)",
                      "its decoder layers cannot be recomputed in the backward pass")
            on = False
        with checkpointing_with_cache(self.model) if on else contextlib.nullcontext():
            yield

    def _base_model(self) -> PreTrainedModel:
        """The transformers model under the adapters (peft types it as a plain ``nn.Module``)."""
        return cast("PreTrainedModel", self.model.get_base_model())

    def _plain_output_layer(self) -> torch.nn.Linear | None:
        """The output layer when logits are exactly ``hidden @ weight.T`` with a frozen weight.

        Then log-probs go through :func:`chosen_logprobs` (no full-vocabulary logits kept);
        models that scale or soft-cap their logits, or a trained output layer, take the
        plain path.
        """
        base = self._base_model()
        head = base.get_output_embeddings()
        cfg = base.config
        if not (type(head) is torch.nn.Linear and head.bias is None):
            reason = "its output layer is not a plain linear map"
        elif head.weight.requires_grad:
            reason = "its output layer is trained"
        elif getattr(cfg, "final_logit_softcapping", None) is not None:
            reason = "its logits are soft-capped"
        elif any(getattr(cfg, name, None) not in (None, 1.0) for name in ("logit_scale", "logits_scaling")):
            reason = "its logits are scaled"
        else:
            return head
        fell_back(cfg, "log-probs from full-vocabulary logits (more memory)", reason)
        return None

    def train_step(self, groups: Sequence[Group]) -> float | None:
        """One GRPO update on ``groups`` (each with this node's rewards). Returns the loss.

        Local groups carry the generated token ids; external ones are re-tokenised from text.
        Completions with zero advantage carry no gradient and are not run, but their tokens
        count in the loss's token-level mean (:mod:`swarmnode.train.grpo`). With one update
        per round the old policy is the current one, so each token's log-prob is computed
        once and its detached copy stands for pi_old. A peer's completion too far from this
        policy is left out (:mod:`swarmnode.train.nearness`; :attr:`nearness` counts them).
        """
        seqs: list[tuple[list[int], list[int]]] = []
        advs: list[float] = []
        sources: list[str] = []
        families: list[str] = []
        owner: list[int] = []  # the index in ``groups`` of each sequence's group
        sums, counts = [0.0] * len(groups), [0] * len(groups)
        self.last_logprobs = [(g, None) for g in groups]
        for gi, g in enumerate(groups):
            adv = group_advantages(torch.tensor([g.rewards], dtype=torch.float32))[0].tolist()
            for j, response in enumerate(g.responses):
                if g.token_ids is not None:
                    pair = (self.prompt(g.question.question), g.token_ids[j])
                else:
                    pair = self.split_response(g.question.question, response)
                seqs.extend(self._encode_pairs([pair]))
                advs.append(adv[j])
                sources.append(g.source)
                families.append(g.question.family)
                owner.append(gi)
        self.nearness.start()
        keep = [i for i, (_, c) in enumerate(seqs) if c and advs[i] != 0.0]
        if not keep:
            return None
        n_tokens = sum(len(completion) for _, completion in seqs)
        self.activate()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        # This node's own completions first: their log-probs are the bar peers' are held to.
        batches = sorted(self._micro_batches(seqs, keep), key=lambda idx: any(sources[i] != LOCAL for i in idx))
        with large_blocks_mmapped():  # see memtrim: without it the heaps fragment to 2.7x the peak
            for idx in batches:
                logp, mask = self._shared_prompt_logp(seqs[idx[0]][0], [seqs[i][1] for i in idx])
                row_sums, row_tokens = (logp.detach() * mask).sum(dim=1).tolist(), mask.sum(dim=1).tolist()
                for i, lp, n in zip(idx, row_sums, row_tokens):
                    sums[owner[i]] += lp
                    counts[owner[i]] += int(n)
                adv = torch.tensor([advs[i] for i in idx], device=logp.device)
                adv = adv * self._near(idx, sources, families,
                                       [lp / max(n, 1) for lp, n in zip(row_sums, row_tokens)], logp.device)
                loss = grpo_loss(logp, logp.detach(), adv, mask, self.cfg.eps_low, self.cfg.eps_high, n_tokens)
                loss.backward()
                total += float(loss.detach())
                # Each micro-batch's backward leaves 60-80 MB of free heap behind at 2 threads,
                # which the next one stacked its peak on (docs/performance.md, memory: heap release).
                release_free_memory()
            if self.cfg.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        self.nearness.finish()
        release_free_memory()
        self.last_logprobs = [(g, sums[i] / counts[i] if counts[i] else None) for i, g in enumerate(groups)]
        return total if math.isfinite(total) else None

    def _near(self, idx: list[int], sources: list[str], families: list[str], means: list[float],
              device: torch.device) -> torch.Tensor:
        """1 for each completion of a micro-batch (its mean log-prob per token in ``means``) that
        stays in the update, 0 for a peer's that :attr:`nearness` leaves out; this node's own
        completions set the bar."""
        self.nearness.own([m for m, i in zip(means, idx) if sources[i] == LOCAL])
        peers = [(m, i) for m, i in zip(means, idx) if sources[i] != LOCAL]
        kept = iter(self.nearness.keep([m for m, _ in peers], [sources[i] for _, i in peers],
                                       [families[i] for _, i in peers]))
        return torch.tensor([1.0 if sources[i] == LOCAL else float(next(kept)) for i in idx], device=device)

    # ---- persistence -------------------------------------------------------------------
    def save_adapter(self, directory: Path) -> None:
        """Write the adapter in PEFT format: ``PeftModel.from_pretrained(base, directory)`` loads it."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.model.peft_config[self.adapter].save_pretrained(str(directory))
        state = get_peft_model_state_dict(self.model, adapter_name=self.adapter)
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()},
                  str(directory / "adapter_model.safetensors"), metadata={"format": "pt"})

    def load_adapter_weights(self, directory: Path) -> None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        state = load_file(str(Path(directory) / "adapter_model.safetensors"), device=str(self.device))
        result = set_peft_model_state_dict(self.model, state, adapter_name=self.adapter)
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"adapter in {directory} does not match this model: {result.unexpected_keys[:3]}")

