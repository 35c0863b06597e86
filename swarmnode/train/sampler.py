"""Batched sampling for GRPO rollouts: n completions per prompt, each stopped at its own end.

Why not ``model.generate``: a GRPO batch is n copies of each prompt, most completions end
after a few tokens at ``</answer>`` or EOS, and a few run to the token limit. This loop
(1) runs the prompt prefill once per distinct prompt, one prompt at a time, and keeps one
copy of its keys and values for its n rows (:mod:`swarmnode.train.prefixattn`),
(2) removes a row from the batch (and from the KV cache) as soon as it ends, so finished
rows cost nothing, and (3) detects the stop string with a per-row text tail and a table of
token texts instead of re-decoding every row each step. The sampling distribution is the
plain temperature softmax (no top-k, no top-p), as the policy gradient assumes.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch

from swarmnode.compat.transformers import keep_rows, repeat_rows
from swarmnode.train import prefixattn

# Prompts in one prefill forward: a batch of 8 x 251-token prompts held about 260 MB more
# than one prompt at a time, at the same speed (docs/performance.md, change 9).
PREFILL_PROMPTS = 1


class TokenTexts:
    """The text of every token id, decoded once per tokenizer (stop-string matching needs it).

    ``size`` covers models whose output layer is larger than the tokenizer (padded
    vocabularies): ids the tokenizer does not know have no text.
    """

    def __init__(self, tokenizer, size: int = 0):
        known = len(tokenizer)
        self.texts: list[str] = tokenizer.batch_decode([[i] for i in range(known)], skip_special_tokens=False)
        self.texts.extend("" for _ in range(size - known))


@torch.no_grad()
def sample(model, tokenizer, prompts: Sequence[str], n: int, *, max_new_tokens: int, temperature: float,
           stop_string: str, eos_id: int | None, token_texts: TokenTexts, device: torch.device,
           should_stop: Callable[[], bool] = lambda: False) -> list[list[int]]:
    """Token ids of ``n`` sampled completions of each prompt, prompt-major (row i*n+j).

    A row ends at EOS (included) or at the token whose text completes ``stop_string``
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
    shared = prefixattn.supported(model.config)
    # Only the shared-prefix cache can be assembled from per-prompt prefills.
    step = PREFILL_PROMPTS if shared else len(prompts)
    logits, caches = [], []
    for a in range(0, len(prompts), step):
        out = model(input_ids=ids[a:a + step], attention_mask=attn[a:a + step],
                    position_ids=positions[a:a + step], use_cache=True, logits_to_keep=1)
        logits.append(out.logits[:, -1, :])
        caches.append(out.past_key_values)
        del out
    if shared:
        cache = prefixattn.SharedPrefixCache(caches, attn, n)
        attending = prefixattn.decoding(model, cache)
    else:
        cache = caches[0]
        repeat_rows(cache, n)
        attending = contextlib.nullcontext()
    del caches
    logits = torch.cat(logits).repeat_interleave(n, dim=0)
    attn = attn.repeat_interleave(n, dim=0)
    next_pos = positions[:, -1:].repeat_interleave(n, dim=0) + 1

    texts = token_texts.texts
    keep_chars = len(stop_string) - 1
    rows = list(range(len(prompts) * n))           # batch position -> output row
    generated: list[list[int]] = [[] for _ in rows]
    tails = ["" for _ in rows]
    with attending:
        for step in range(max_new_tokens):
            if temperature == 0:
                tokens = logits.argmax(dim=-1, keepdim=True)
            else:
                tokens = torch.multinomial(torch.softmax(logits.float() / temperature, dim=-1), 1)
            keep: list[int] = []
            for pos, (row, tok) in enumerate(zip(rows, tokens[:, 0].tolist())):
                generated[row].append(tok)
                text = tails[row] + texts[tok]
                if tok == eos_id or stop_string in text:
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
    return generated
