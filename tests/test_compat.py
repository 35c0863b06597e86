"""swarmnode/compat: the installed libraries lie in each door's checked range, and every door works on them.

transformers' doors run here on the tiny model. hivemind's and py-libp2p's run in a
subprocess each (the two stacks cannot share a process), on real p2pd / py-libp2p hosts on
127.0.0.1. ``.ci/transformers-release`` runs this file's transformers tests, with the sampler
and log-prob equivalence tests, against the newest release the bound admits.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from programs import output
from swarmnode.compat import transformers as tf_compat

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "swarmnode" / "compat"
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def _constant(module: str, name: str):
    """A literal module constant read from the source: importing hivemind's or libp2p's door here
    would import that stack into the test process."""
    tree = ast.parse((COMPAT / f"{module}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{name} not in compat/{module}.py")


def _bound(distribution: str) -> str:
    deps = [Requirement(d) for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    return str(next(d.specifier for d in deps if d.name == distribution))


RANGES = [("transformers", "transformers", "CHECKED_RANGE", "CHECKED_ON"),
          ("peft", "transformers", "PEFT_CHECKED_RANGE", "PEFT_CHECKED_ON"),
          ("reasoning-gym", "reasoning_gym", "CHECKED_RANGE", "CHECKED_ON"),
          ("hivemind", "hivemind", "CHECKED_RANGE", "CHECKED_ON"),
          ("libp2p", "libp2p", "CHECKED_RANGE", "CHECKED_ON")]


@pytest.mark.parametrize("distribution,module,range_name,on_name", RANGES)
def test_installed_release_lies_in_the_checked_range_pyproject_declares(distribution, module, range_name, on_name):
    checked = SpecifierSet(_constant(module, range_name))
    assert str(checked) == _bound(distribution), "pyproject.toml's bound and the compat module's range differ"
    assert any(s.operator == "<" for s in checked), "no upper bound"
    assert all(Version(v) in checked for v in _constant(module, on_name))
    installed = importlib.metadata.version(distribution)
    assert Version(installed) in checked, f"{distribution} {installed} is outside the checked range {checked}"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


# Internals the doors wrap whose names are not private: no module but its door may use them.
_WRAPPED = {"call_ping", "peer_id_to_uid", "seen_messages", "unblock_peer", "anyio_service", "batch_repeat_interleave",
            "batch_select_indices", "lazy_initialization", "is_initialized", "hf_quantizer", "layer_idx",
            "layer_class_to_replicate", "get_gguf_hf_weights_map", "TENSOR_PROCESSORS"}


def _defined_private_names(sources: list[Path]) -> set[str]:
    names = set()
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return {n for n in names if n.startswith("_")}


# The hivemind transport's modules that run hivemind: only they may use its internals.
HIVEMIND_DOORS = {f"swarmnode/swarm/transport/hivemind/{name}.py"
                  for name in ("transport", "server", "records", "storage", "dht_process")}
# The libp2p transport's modules that run the host: only they may use py-libp2p's internals.
LIBP2P_DOORS = {f"swarmnode/swarm/transport/libp2p/{name}.py" for name in ("transport", "host")}


def test_only_the_doors_touch_library_internals():
    sources = sorted((ROOT / "swarmnode").rglob("*.py"))
    own = _defined_private_names([p for p in sources if p.parent != COMPAT])
    found = []
    for path in sources:
        rel = path.relative_to(ROOT).as_posix()
        imports = _imports(path)
        if rel not in HIVEMIND_DOORS:
            assert not any(i.startswith("swarmnode.compat.hivemind") for i in imports), rel
        if rel not in LIBP2P_DOORS:
            assert not any(i.startswith("swarmnode.compat.libp2p") for i in imports), rel
        if path.parent == COMPAT:
            if path.stem != "hivemind":
                assert not any(i.split(".")[0] == "hivemind" for i in imports), rel
            if path.stem != "libp2p":
                assert not any(i.split(".")[0] == "libp2p" for i in imports), rel
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                base = node.value.id if isinstance(node.value, ast.Name) else None
                private = node.attr.startswith("_") and not node.attr.startswith("__") and node.attr not in own
                if (private and base not in ("self", "cls") and base not in sys.stdlib_module_names) \
                        or node.attr in _WRAPPED:
                    found.append(f"{rel}:{node.lineno} .{node.attr}")
        found += [f"{rel}: imports {i}" for i in imports if any(p in _WRAPPED for p in i.split("."))]
    assert not found, "library internals outside swarmnode/compat: " + ", ".join(found)


# ---- transformers, on the tiny model ---------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.set_attn_implementation("sdpa")
    return model


def _ids(rows: int = 2, length: int = 5) -> torch.Tensor:
    return torch.arange(rows * length).reshape(rows, length) % 50 + 10


def test_checkpointing_keeps_the_cache_and_recomputes_every_layer(tiny, monkeypatch):
    calls = []
    real = torch.utils.checkpoint.checkpoint
    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    tiny.train()
    try:
        cache = tf_compat.LayeredCache([tf_compat.CacheLayer() for _ in range(tiny.config.num_hidden_layers)])
        with tf_compat.checkpointing_with_cache(tiny):
            tiny(input_ids=_ids(), past_key_values=cache, use_cache=False).logits.sum().backward()
    finally:
        tiny.eval()
        tiny.zero_grad(set_to_none=True)
    assert len(calls) == tiny.config.num_hidden_layers and all(kw.get("use_reentrant") is False for kw in calls)
    # The first run and the backward replay each appended to the cache: checkpointed layers
    # kept it (a replay-safe layer is kvcache's job, not the door's).
    assert cache.get_seq_length() == 2 * 5
    assert not any(getattr(m, "gradient_checkpointing", False) for m in tiny.modules())


def test_attention_swap_layer_index_and_head_grouping(tiny):
    from transformers import AttentionInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import repeat_kv

    seen = []

    def spy(module, query, key, value, *args, **kwargs):
        heads, kv_heads = query.shape[1], key.shape[1]
        grouped = torch.matmul(tf_compat.group_query_heads(query, kv_heads), key.transpose(-1, -2))
        reference = torch.matmul(query, repeat_kv(key, heads // kv_heads).transpose(-1, -2))
        seen.append((tf_compat.layer_index(module), kv_heads < heads,
                     torch.allclose(tf_compat.ungroup_query_heads(grouped, heads), reference, atol=1e-6)))
        return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, *args, **kwargs)

    AttentionInterface.register("swarmnode_compat_spy", spy)
    with torch.no_grad():
        expected = tiny(input_ids=_ids()).logits
        with tf_compat.attention_swapped(tiny.config, "swarmnode_compat_spy"):
            got = tiny(input_ids=_ids()).logits
        tiny(input_ids=_ids())  # the block is over: the model's own attention again, not the spy
    assert seen == [(i, True, True) for i in range(tiny.config.num_hidden_layers)]
    assert torch.allclose(got, expected)


def test_cache_layers_rows_and_growing_cache(tiny):
    layer = tf_compat.CacheLayer()
    assert not layer.stored() and layer.get_seq_length() == 0
    keys = torch.randn(3, 2, 4, 8, dtype=torch.float64)
    layer.hold(keys, keys + 1)
    assert layer.stored() and layer.get_seq_length() == 4
    assert (layer.dtype, layer.device) == (torch.float64, keys.device)

    kept = []

    class Recording(tf_compat.LayeredCache):
        def keep_rows(self, indices):
            kept.append(indices.tolist())
            super().keep_rows(indices)

    cache = Recording([layer])
    tf_compat.keep_rows(cache, torch.tensor([2, 0]))
    assert kept == [[2, 0]] and torch.equal(layer.keys, keys[[2, 0]]) and torch.equal(layer.values, keys[[2, 0]] + 1)

    growing = tf_compat.growing_cache(tf_compat.CacheLayer)
    with torch.no_grad():
        tiny(input_ids=_ids(2, 5), past_key_values=growing, use_cache=True)
    assert len(growing.layers) == tiny.config.num_hidden_layers
    assert all(type(x) is tf_compat.CacheLayer for x in growing.layers)
    before = growing.layers[0].keys.clone()
    tf_compat.repeat_rows(growing, 3)
    assert torch.equal(growing.layers[0].keys, before.repeat_interleave(3, dim=0))
    tf_compat.keep_rows(growing, torch.tensor([0, 5]))
    assert torch.equal(growing.layers[0].keys, before)


def test_drop_quantizer_lets_a_dequantized_model_save(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    # What a GGUF load leaves behind: a quantizer that cannot serialize.
    model.hf_quantizer = SimpleNamespace(quantization_config=SimpleNamespace(quant_method="gguf"))
    with pytest.raises(ValueError, match="quantized with gguf"):
        model.save_pretrained(tmp_path / "refused")
    tf_compat.drop_quantizer(model)
    model.save_pretrained(tmp_path / "saved")
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "saved").config.num_hidden_layers == 2


def test_adapter_parameters_are_exactly_one_adapters_trainable_weights(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora, adapter_name="a")
    model.add_adapter("b", replace(lora))
    for name in ("a", "b"):
        model.set_adapter(name)
        trainable = {id(p) for p in model.parameters() if p.requires_grad}
        assert {id(p) for p in tf_compat.adapter_parameters(model, name)} == trainable
        assert len(trainable) == 4 * model.config.num_hidden_layers  # A and B of two projections


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_attention_functions_get_the_layers_scaling_and_window(arch, tmp_path):
    """What prefixattn's decoding attention reads from the keyword arguments, on each architecture."""
    from transformers import AttentionInterface, AutoModelForCausalLM
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from tinymodel import GEMMA3_WINDOW, build_tiny_model

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path, arch=arch), dtype=torch.float32)
    cfg = model.config
    seen = {}

    def spy(module, query, key, value, *args, **kwargs):
        seen[tf_compat.layer_index(module)] = (kwargs.get("scaling"), kwargs.get("sliding_window"))
        return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, *args, **kwargs)

    AttentionInterface.register("swarmnode_compat_kwargs_spy", spy)
    with torch.no_grad(), tf_compat.attention_swapped(cfg, "swarmnode_compat_kwargs_spy"):
        model(input_ids=_ids())
    scale = (cfg.query_pre_attn_scalar if arch == "gemma3" else cfg.hidden_size // cfg.num_attention_heads) ** -0.5
    types = getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers
    windows = [GEMMA3_WINDOW if t == "sliding_attention" else None for t in types]
    assert seen == {i: (pytest.approx(scale), w) for i, w in enumerate(windows)}
    assert (arch == "gemma3") == any(w is not None for w in windows)
    assert tf_compat.checkpointable(model) and not tf_compat.checkpointable(torch.nn.Linear(2, 2))


# ---- hivemind and py-libp2p, one process each (tests/programs/compat_*.py) -----------------


def _run_check(program: str) -> dict:
    return json.loads(output(program).splitlines()[-1])


@pytest.mark.slow
def test_hivemind_doors_on_two_real_dht_nodes():
    assert _run_check("compat_hivemind") == {"routed before": False, "ping": True, "routed after": True,
                                             "key id": True, "other key id": False,
                                             "storage sees subkeyed writes": True,
                                             "deleting the subkey drops the record": True,
                                             "pinged a new node gets a copy by default": True,
                                             "a new node gets a copy by default": True,
                                             "routed a new node gets a copy by default": True,
                                             "ids held of a peer claiming five a new node gets a copy by default": 5,
                                             "pinged no copy once guarded": True, "no copy once guarded": True,
                                             "routed no copy once guarded": True,
                                             "ids held of a peer claiming five no copy once guarded": 1}


@pytest.mark.slow
def test_libp2p_doors_on_two_real_hosts():
    assert _run_check("compat_libp2p") == {"dial, nobody listening": False, "dial again, now listening": False,
                                           "dial after allow_redial": True, "threads left": 0}


@pytest.mark.slow
def test_libp2p_yamux_credit_batches_on_real_hosts():
    assert _run_check("compat_yamux") == {"by default, one a read or more": True, "batched, at most 15": True}


@pytest.mark.slow
def test_libp2p_inbound_slot_comes_back_when_its_connection_closes():
    # Stock py-libp2p gives a slot back only when the host stops: 3 of 8 in turn. With the door
    # every closed connection's slot comes back, while the 3 open at once stay the cap; and a
    # connection reaching the host's listener after it stopped is closed without a warning.
    assert _run_check("compat_libp2p_slots") == {"stock: accepted in turn of 8": 3,
                                                 "stock: a client after the host stopped connects": False,
                                                 "stock: ... and the host logs ADDCONN_FAIL": True,
                                                 "released: accepted in turn of 8": 8,
                                                 "released: accepted at once of 5": 3,
                                                 "released: one more after": True,
                                                 "released: a client after the host stopped connects": False,
                                                 "released: ... and the host logs ADDCONN_FAIL": False}


@pytest.mark.slow
def test_libp2p_host_keeps_its_own_keys_when_its_peerstore_is_full():
    # Stock py-libp2p evicts the host's own keys once its peerstore is full, and the next identify ends the host.
    assert _run_check("compat_libp2p_own_key") == {"stock: own key after meeting 10 peers": False,
                                                   "stock: the host survived": False,
                                                   "kept: own key after meeting 10 peers": True,
                                                   "kept: answers identify": True, "kept: the host survived": True}


def test_a_tokenizer_without_its_construction_tables_encodes_decodes_and_saves_the_same(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer, Qwen2Tokenizer

    from swarmnode.compat.transformers import drop_construction_tables

    backend = AutoTokenizer.from_pretrained(tiny_model_dir).backend_tokenizer
    model = json.loads(backend.to_str())["model"]
    built = dict(vocab=model["vocab"], merges=[tuple(m) if isinstance(m, list) else tuple(m.split(" "))
                                                for m in model["merges"]], eos_token="<|im_end|>")
    kept, dropped = Qwen2Tokenizer(**built), Qwen2Tokenizer(**built)
    assert len(dropped._vocab) > 100 and len(dropped._merges) > 100  # what the contract says it keeps
    drop_construction_tables(dropped)
    assert not hasattr(dropped, "_vocab") and not hasattr(dropped, "_merges")
    text = "What is 12 + 7? <answer>19</answer> letters: strawberry"
    ids = kept(text)["input_ids"]
    assert dropped(text)["input_ids"] == ids and dropped.decode(ids) == kept.decode(ids) == text
    assert dropped.get_vocab() == kept.get_vocab() and len(dropped) == len(kept)
    dropped.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path)(text)["input_ids"] == ids
    drop_construction_tables(dropped)  # again, and on a tokenizer that never had them: nothing to do
