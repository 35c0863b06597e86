"""Batched sampling for GRPO rollouts: n completions per prompt, each stopped at its own end.

Why not ``model.generate``: a GRPO batch is n copies of each prompt, most completions end
after a few tokens at ``</answer>`` or EOS, and a few run to the token limit. This loop
(1) runs the prompt prefill once per distinct prompt, one prompt at a time, and keeps one
copy of its keys and values for its n rows (:mod:`swarmnode.train.prefixattn`),
(2) removes a row from the batch (and from the KV cache) as soon as it ends, so finished
rows cost nothing, and (3) detects the stop string with a per-row text tail and a table of
token texts instead of re-decoding every row each step. The sampling distribution is the
plain temperature softmax (no top-k, no top-p), as the policy gradient assumes.

A model whose attention :mod:`~swarmnode.train.prefixattn` cannot compute exactly decodes
with transformers' own cache instead (L copies of each prompt's states), and the log says so
once per process and model type.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Collection, Sequence

import torch

from swarmnode.compat.transformers import CacheLayer, growing_cache, keep_rows, repeat_rows
from swarmnode.train import prefixattn
from swarmnode.train.fallback import fell_back
from swarmnode.train.memtrim import release_free_memory

# Decoding steps between returns of free heap to the OS. A step's own tensors (logits, scores,
# each prompt's rows' states read in fp32) leave free blocks resident behind them: with the
# trim every 8 steps, 64 rows decoding 256 tokens peaked 20 MB lower, 2% slower
# (docs/performance.md, memory: heap release).
TRIM_EVERY_STEPS = 8
# Rows whose next token is drawn at once. A draw holds the rows' probabilities and
# multinomial's own buffer of the same size beside the step's logits: 64 rows of Qwen2.5's
# vocabulary are 39 MB each, 8 rows 5 MB. On the CPU the chunked draws are the same tokens as
# one draw over every row (the generator fills in row order; tests/test_sampler.py).
DRAW_ROWS = 8


def _shared_prefix(config) -> bool:
    """Whether ``config``'s model decodes with one copy of each prompt's states (else the log says why, once)."""
    reason = prefixattn.unsupported_reason(config)
    if reason is not None:
        fell_back(config, "sampling with a copy of each prompt's keys and values in every row (more memory)", reason)
    return reason is None


def end_ids(model, tokenizer) -> frozenset[int]:
    """The token ids that end a completion: the tokenizer's EOS and padding token, and every EOS
    the model's config and generation config name. Padding is no text: Qwen2.5's is
    ``<|endoftext|>``, which its own generation config lists beside ``<|im_end|>`` (the GGUF's
    conversion keeps only the latter)."""
    ids: set[int] = set()
    for source in (tokenizer.eos_token_id, tokenizer.pad_token_id, model.config.eos_token_id,
                   getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        ids.update([source] if isinstance(source, int) else source or ())
    return frozenset(ids)


class TokenTexts:
    """The text of every token id, decoded once per tokenizer (stop-string matching needs it).

    ``size`` covers models whose output layer is larger than the tokenizer (padded
    vocabularies): ids the tokenizer does not know have no text.
    """

    def __init__(self, tokenizer, size: int = 0):
        known = len(tokenizer)
        # One id at a time: batch_decode of Qwen2.5's 151,936 ids took 0.56 s and left 14 MB of
        # heap behind (the list of one-id lists), this loop 0.32 s and 2 MB, the same texts.
        self.texts: list[str] = [tokenizer.decode([i], skip_special_tokens=False) for i in range(known)]
        self.texts.extend("" for _ in range(size - known))


def draw(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """One token id per row [R, 1] from ``logits`` [R, V] (divided by ``temperature`` in place,
    when fp32): the softmax's at that temperature, the argmax at 0."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    tokens = torch.empty((logits.shape[0], 1), dtype=torch.long, device=logits.device)
    for s in range(0, logits.shape[0], DRAW_ROWS):
        rows = logits[s:s + DRAW_ROWS].float().div_(temperature)
        tokens[s:s + DRAW_ROWS] = torch.multinomial(rows.softmax(dim=-1), 1)
    return tokens


@torch.no_grad()
def sample(model, tokenizer, prompts: Sequence[str], n: int, *, max_new_tokens: int, temperature: float,
           stop_string: str, eos_ids: Collection[int], token_texts: TokenTexts, device: torch.device,
           should_stop: Callable[[], bool] = lambda: False) -> list[list[int]]:
    """Token ids of ``n`` sampled completions of each prompt, prompt-major (row i*n+j).

    A row ends at any of ``eos_ids`` (included) or at the token whose text completes ``stop_string``
    (included), or after ``max_new_tokens``. ``should_stop()`` true ends every row at once.
    ``temperature`` 0 decodes greedily (the yardstick). The caller sets the random
    seed and puts the model in eval mode.
    """
    if max_new_tokens < 1 or not prompts:
        return [[] for _ in range(len(prompts) * n)]
    saved_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = saved_side
    ids, attn = enc["input_ids"].to(device), enc["attention_mask"].to(device)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    shared = _shared_prefix(model.config)
    if shared:
        # One prompt at a time, without its padding: a batch of 8 x 251-token prompts held about
        # 260 MB more than one prompt at a time at the same speed (docs/performance.md, sampling:
        # each prompt once), and a padded batch computes every prompt at the longest one's length
        # (1.7x the tokens in Qwen2.5's first rounds). The cache keeps every prompt state (the
        # model's own would keep only a sliding layer's window); the shared-prefix cache pads them
        # back.
        logits, caches = [], []
        for i in range(len(prompts)):
            real = ids[i:i + 1, attn[i].bool()]
            out = model(input_ids=real, position_ids=torch.arange(real.shape[1], device=device)[None],
                        past_key_values=growing_cache(CacheLayer), use_cache=True, logits_to_keep=1)
            logits.append(out.logits[:, -1, :])
            caches.append(out.past_key_values)
            del out
        cache = prefixattn.SharedPrefixCache(caches, attn, n, capacity=max_new_tokens - 1)
        attending = prefixattn.decoding(model, cache)
        del caches
        logits = torch.cat(logits).repeat_interleave(n, dim=0)
    else:
        out = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        repeat_rows(cache, n)
        attending = contextlib.nullcontext()
        logits = out.logits[:, -1, :].repeat_interleave(n, dim=0)
        del out
    attn = attn.repeat_interleave(n, dim=0)
    next_pos = positions[:, -1:].repeat_interleave(n, dim=0) + 1

    texts = token_texts.texts
    ends = frozenset(eos_ids)
    keep_chars = len(stop_string) - 1
    rows = list(range(len(prompts) * n))           # batch position -> output row
    generated: list[list[int]] = [[] for _ in rows]
    tails = ["" for _ in rows]
    with attending:
        for step in range(max_new_tokens):
            tokens = draw(logits, temperature)
            logits = None  # gone before the next step's are made
            keep: list[int] = []
            for pos, (row, tok) in enumerate(zip(rows, tokens[:, 0].tolist())):
                generated[row].append(tok)
                text = tails[row] + texts[tok]
                if tok in ends or stop_string in text:
                    continue
                tails[row] = text[-keep_chars:] if keep_chars else ""
                keep.append(pos)
            if not keep or step == max_new_tokens - 1 or should_stop():
                break
            if len(keep) < len(rows):
                index = torch.tensor(keep, device=device)
                keep_rows(cache, index)
                attn, next_pos, tokens = attn[index], next_pos[index], tokens[index]
                rows = [rows[i] for i in keep]
            attn = torch.cat([attn, attn.new_ones((len(rows), 1))], dim=-1)
            logits = model(input_ids=tokens, attention_mask=attn, position_ids=next_pos, past_key_values=cache,
                           use_cache=True).logits[:, -1, :]
            next_pos = next_pos + 1
            if step % TRIM_EVERY_STEPS == TRIM_EVERY_STEPS - 1:
                release_free_memory()
    return generated
