"""The rollout sampler: KV-cache copying, row removal and stopping give the model's own tokens.

Each test runs on a tiny random model of every catalogue architecture (``tests/tinymodel.py``):
Llama, Qwen2 (3 query heads per key/value head, a vocabulary padded beyond the tokenizer) and
Gemma 3 (sliding-window layers whose window is shorter than every prompt).
"""

import logging
from dataclasses import replace

import pytest
import torch

from swarmnode.config import NodeConfig
from swarmnode.train import prefixattn
from swarmnode.train.model import load_base_model
from swarmnode.train.policy import Policy
from swarmnode.train.sampler import DRAW_ROWS, draw, end_ids, sample
from tinymodel import ARCHITECTURES, TEST_DEVICE, build_tiny_model

STOP = "</answer>"


@pytest.fixture(scope="module", params=ARCHITECTURES)
def policy(request, tmp_path_factory):
    model_dir = build_tiny_model(tmp_path_factory.mktemp(request.param), arch=request.param)
    base = load_base_model(str(model_dir), torch.device(TEST_DEVICE))
    # Larger weights than the init's, so greedy paths differ between prompts; drawn on the CPU
    # whatever the test device, so every device decodes the same model.
    cpu = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in base.model.parameters():
            p.copy_(torch.randn(p.shape, generator=cpu) * 0.3)
    pol = Policy(base, replace(NodeConfig(), lora_r=4, lora_alpha=8))
    with torch.no_grad():
        for p in pol.params:
            p.copy_(torch.randn(p.shape, generator=cpu) * 0.05)
    pol.model.eval()
    return pol


def _greedy_reference(policy, prompt: str, max_new: int, eos: int, stop: str) -> list[int]:
    """Greedy decoding by full forwards without any cache: the ground truth."""
    ids = policy.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    out: list[int] = []
    with torch.no_grad():
        for _ in range(max_new):
            tok = int(policy.model(input_ids=torch.tensor([ids + out], device=policy.device)).logits[0, -1].argmax())
            out.append(tok)
            if tok == eos or stop in policy.tokenizer.decode(out):
                break
    return out


@pytest.mark.parametrize("shared_prefix", [True, False])
def test_rows_match_uncached_greedy_decoding_with_early_ends(policy, monkeypatch, request, shared_prefix):
    """Both decoding paths: prompt states shared by their rows, and transformers' own cache.
    States kept in the model's dtype, so any difference is a caching bug, not rounding."""
    calls = []
    real_attention = prefixattn._attention
    if not shared_prefix:
        monkeypatch.setattr(prefixattn, "unsupported_reason", lambda config: "a test says so")
    monkeypatch.setattr(prefixattn, "storage_dtype", lambda dtype: dtype)
    prefixattn.AttentionInterface.register(prefixattn.NAME,
                                           lambda *a, **kw: calls.append(1) or real_attention(*a, **kw))
    request.addfinalizer(lambda: prefixattn.AttentionInterface.register(prefixattn.NAME, real_attention))
    prompts = [policy.prompt("Calculate 1 + 2."), policy.prompt("Is 2000 a leap year? Answer Yes or No."),
               policy.prompt("x")]
    max_new, stop = 12, "never in this vocabulary"
    window = getattr(policy.model.config, "sliding_window", None)
    # Gemma 3's window is crossed by every prompt and, while decoding, by the rows' own tokens.
    assert window is None or max_new > window
    free = [_greedy_reference(policy, p, max_new, -1, stop) for p in prompts]
    # An 'EOS' that ends some prompts' rows earlier than others', so rows leave the batch early.
    ends = {t: [row.index(t) + 1 if t in row else max_new for row in free] for row in free for t in row}
    eos = max(ends, key=lambda t: max(ends[t]) - min(ends[t]))
    assert max(ends[eos]) > min(ends[eos]), free
    refs = [_greedy_reference(policy, p, max_new, eos, stop) for p in prompts]
    rows = sample(policy.model, policy.tokenizer, prompts, 2, max_new_tokens=max_new, temperature=1e-4,
                  stop_string=stop, eos_ids={eos}, token_texts=policy.token_texts, device=torch.device(TEST_DEVICE))
    assert rows == [r for r in refs for _ in range(2)]
    assert bool(calls) == shared_prefix
    before = len(calls)
    with torch.no_grad():  # the sampling is over: a forward calls the model's own attention again
        policy.model(input_ids=torch.tensor([[1, 2, 3]], device=policy.device))
    assert len(calls) == before


class _Recording:
    """The model, keeping the logits of every forward ``sample`` makes, and the caches it decodes with."""

    def __init__(self, model):
        self.model, self.logits, self.caches = model, [], []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, **kwargs):
        out = self.model(**kwargs)
        self.logits.append(out.logits[:, -1].clone())
        if kwargs.get("past_key_values") is not None:
            self.caches.append(kwargs["past_key_values"])
        return out


def test_states_are_held_in_bf16_and_the_logits_stay_close(policy, monkeypatch):
    prompts = [policy.prompt("Calculate 1 + 2."), policy.prompt("x")]
    runs = {}
    for name, storage in (("fp32", lambda dtype: dtype), ("bf16", prefixattn.storage_dtype)):
        monkeypatch.setattr(prefixattn, "storage_dtype", storage)
        model = _Recording(policy.model)
        rows = sample(model, policy.tokenizer, prompts, 2, max_new_tokens=8, temperature=1e-4, stop_string=STOP,
                      eos_ids=(), token_texts=policy.token_texts, device=torch.device(TEST_DEVICE))
        runs[name] = (rows, model)
    layer = runs["bf16"][1].caches[-1].layers[0]
    assert layer.prefix_keys.dtype == layer.keys.dtype == layer.values.dtype == torch.bfloat16
    assert runs["fp32"][1].caches[-1].layers[0].keys.dtype == torch.float32
    # Compare the steps up to the first one at which a row's greedy choice differs.
    (rows32, m32), (rows16, m16) = runs["fp32"], runs["bf16"]
    same = next((i for i in range(8) if [r[:i + 1] for r in rows32] != [r[:i + 1] for r in rows16]), 8)
    assert same >= 2, (rows32, rows16)
    diffs = [(a - b).abs().max() / a.std() for a, b in zip(m32.logits[:same + 1], m16.logits[:same + 1])]
    assert diffs[0] == 0  # the prefill reads no cache
    assert 0 < max(diffs) < 0.05, diffs


def _forcing(policy, sequence: list[int]):
    """A forward hook on the output layer that makes ``sequence[i]`` near-certain at decoding step i."""
    calls = []

    def hook(module, inputs, output):
        bias = torch.zeros(output.shape[-1], device=output.device)
        bias[sequence[min(len(calls), len(sequence) - 1)]] = 50.0
        calls.append(1)
        return output + bias

    return policy.model.get_output_embeddings().register_forward_hook(hook)


def test_completions_end_at_the_stop_string(policy):
    stop_id = policy.tokenizer.convert_tokens_to_ids(STOP)
    handle = _forcing(policy, [stop_id])
    try:
        torch.manual_seed(0)
        rows = sample(policy.model, policy.tokenizer, [policy.prompt("q")], 3, max_new_tokens=10, temperature=1.0,
                      stop_string=STOP, eos_ids=(), token_texts=policy.token_texts, device=torch.device(TEST_DEVICE))
    finally:
        handle.remove()
    assert rows == [[stop_id]] * 3


def test_a_stop_string_split_across_tokens_ends_the_row_at_its_last_piece(policy):
    """As ``</answer>`` is for Qwen's and Gemma's tokenizers: the end is seen in the rows' text."""
    tok = policy.tokenizer
    pieces = [tok.convert_tokens_to_ids(t) for t in tok.tokenize("123 abc")]
    assert len(pieces) >= 3
    texts = policy.token_texts.texts
    stop = texts[pieces[1]][-1] + texts[pieces[2]][:1]  # from the end of one token into the next
    handle = _forcing(policy, pieces)
    try:
        torch.manual_seed(0)
        rows = sample(policy.model, tok, [policy.prompt("q")], 2, max_new_tokens=10, temperature=1.0,
                      stop_string=stop, eos_ids=(), token_texts=policy.token_texts, device=torch.device(TEST_DEVICE))
    finally:
        handle.remove()
    assert rows == [pieces[:3]] * 2


def test_every_end_of_text_id_ends_a_row(policy):
    ends = end_ids(policy.model, policy.tokenizer)
    assert {policy.tokenizer.eos_token_id, policy.tokenizer.pad_token_id} <= ends
    for end in ends:
        handle = _forcing(policy, [end])
        try:
            rows = sample(policy.model, policy.tokenizer, [policy.prompt("q")], 2, max_new_tokens=10,
                          temperature=1.0, stop_string=STOP, eos_ids=ends, token_texts=policy.token_texts,
                          device=torch.device(TEST_DEVICE))
        finally:
            handle.remove()
        assert rows == [[end]] * 2


def test_should_stop_ends_every_row(policy):
    torch.manual_seed(0)
    rows = sample(policy.model, policy.tokenizer, [policy.prompt("q")], 2, max_new_tokens=50, temperature=1.0,
                  stop_string=STOP, eos_ids=(), token_texts=policy.token_texts,
                  device=torch.device(TEST_DEVICE), should_stop=lambda: True)
    assert [len(r) for r in rows] == [1, 1]


def test_long_decoding_returns_free_heap_every_few_steps(policy, monkeypatch):
    from swarmnode.train import sampler

    trims = []
    monkeypatch.setattr(sampler, "release_free_memory", lambda: trims.append(1))
    torch.manual_seed(0)
    steps = 3 * sampler.TRIM_EVERY_STEPS + 1
    rows = sample(policy.model, policy.tokenizer, [policy.prompt("q")], 2, max_new_tokens=steps, temperature=1.0,
                  stop_string="never in these rows", eos_ids=(), token_texts=policy.token_texts,
                  device=torch.device(TEST_DEVICE))
    assert [len(r) for r in rows] == [steps, steps]
    assert len(trims) == 3


def test_policy_generate_counts_and_decodes(policy):
    torch.manual_seed(1)
    gen = policy.generate([policy.prompt("a"), policy.prompt("b")], 3, max_new_tokens=6, temperature=1.0)
    assert [len(g) for g in gen.texts] == [3, 3] and [len(g) for g in gen.token_ids] == [3, 3]
    assert gen.tokens == sum(len(r) for g in gen.token_ids for r in g)
    assert all(1 <= len(r) <= 6 for g in gen.token_ids for r in g)
    assert gen.texts[0][0] == policy.tokenizer.decode(gen.token_ids[0][0], skip_special_tokens=True)


def test_a_model_the_shared_prefix_cannot_compute_falls_back_and_says_so_once(policy, caplog, monkeypatch):
    from transformers import Gemma3TextConfig, Qwen2Config

    from swarmnode.train import fallback

    assert prefixattn.unsupported_reason(policy.model.config) is None
    assert prefixattn.unsupported_reason(Gemma3TextConfig(sliding_window=4)) is None
    assert "soft-capped" in prefixattn.unsupported_reason(Gemma3TextConfig(attn_logit_softcapping=50.0))
    linear = Qwen2Config(num_hidden_layers=2, layer_types=["full_attention", "linear_attention"])
    assert "linear_attention" in prefixattn.unsupported_reason(linear)

    monkeypatch.setattr(fallback, "_reported", set())
    monkeypatch.setattr(prefixattn, "unsupported_reason", lambda config: "a test says so")
    caplog.set_level(logging.INFO, logger="swarmnode.train")
    for _ in range(2):
        sample(policy.model, policy.tokenizer, [policy.prompt("q")], 2, max_new_tokens=2, temperature=1.0,
               stop_string=STOP, eos_ids=(), token_texts=policy.token_texts, device=torch.device(TEST_DEVICE))
    said = [r.getMessage() for r in caplog.records if "a test says so" in r.getMessage()]
    assert len(said) == 1 and policy.model.config.model_type in said[0], said


@pytest.fixture(scope="module")
def bf16_policy(tmp_path_factory):
    """A tiny random-weight model with bf16 frozen weights on the CPU (``dtype`` bfloat16 there)."""
    model_dir = build_tiny_model(tmp_path_factory.mktemp("bf16"))
    base = load_base_model(str(model_dir), torch.device("cpu"), torch.bfloat16)
    cpu = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in base.model.parameters():
            p.copy_(torch.randn(p.shape, generator=cpu) * 0.3)
    pol = Policy(base, replace(NodeConfig(), lora_r=4, lora_alpha=8))
    pol.model.eval()
    return pol


def test_bf16_weights_decode_with_fp32_attention_products_close_to_the_plain_forward(bf16_policy, monkeypatch):
    """Under bf16 weights on a CPU the decoding attention multiplies in fp32 (no oneDNN kernel per
    key count); each step's logits stay within bf16's rounding of the model's own uncached forward
    over the same tokens."""
    policy = bf16_policy
    seen = []
    real_per_run = prefixattn._per_run
    monkeypatch.setattr(prefixattn, "_per_run", lambda cache, x, *a: seen.append(x.dtype) or real_per_run(cache, x, *a))
    prompts = [policy.prompt("Calculate 1 + 2."), policy.prompt("x")]
    model = _Recording(policy.model)
    rows = sample(model, policy.tokenizer, prompts, 2, max_new_tokens=8, temperature=1.0,
                  stop_string="never in this vocabulary", eos_ids=(), token_texts=policy.token_texts,
                  device=torch.device("cpu"))
    assert seen and set(seen) == {torch.float32}
    assert all(len(r) == 8 for r in rows) and all(logits.dtype == torch.bfloat16 for logits in model.logits)
    ids = policy.tokenizer(prompts[0], add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        plain = policy.model(input_ids=torch.tensor([ids + rows[0][:-1]])).logits[0, len(ids) - 1:].float()
    # The prefills' logits (one a prompt), then every decoding step's, whose first row is row 0.
    steps = torch.stack([model.logits[0][0]] + [logits[0] for logits in model.logits[len(prompts):]]).float()
    assert steps.shape == plain.shape
    diffs = (steps - plain).abs().amax(dim=-1) / plain.std(dim=-1)
    assert float(diffs.max()) < 0.1, diffs


@pytest.mark.parametrize("rows", [1, DRAW_ROWS, 3 * DRAW_ROWS + 5])
def test_draws_a_few_rows_at_a_time_give_the_tokens_of_one_draw_over_every_row(rows):
    logits = torch.randn(rows, 5_000, generator=torch.Generator().manual_seed(rows)) * 4
    torch.manual_seed(7)
    whole = torch.multinomial((logits / 0.7).softmax(dim=-1), 1)
    torch.manual_seed(7)
    drawn = draw(logits.clone(), 0.7)
    assert drawn.shape == (rows, 1) and drawn.dtype == torch.long
    assert torch.equal(drawn, whole)
    assert len(set(drawn[:, 0].tolist())) > 1 or rows == 1  # samples, not the argmax of every row
    assert torch.equal(draw(logits, 0), logits.argmax(dim=-1, keepdim=True))
