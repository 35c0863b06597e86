"""Which model a node runs: ``--model auto`` resolved for this machine, aliases by their names.

The rule itself is a pure function of the accelerator, its memory and the cores
(:func:`swarmnode.catalogue.auto_model`); this module measures the machine for it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from swarmnode.catalogue import AUTO, AutoChoice, auto_model, catalogue_entry, model_round
from swarmnode.config import NodeConfig
from swarmnode.docsgen import toml_value
from swarmnode.node.threads import physical_cores
from swarmnode.train.model import pick_device, pick_dtype, prepare_model

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Machine:
    accelerator: str  # "cuda", "mps" or "cpu": the device the node runs on
    memory_bytes: int  # the GPU's memory for CUDA, the system's otherwise
    cores: int  # physical cores this process may use


def this_machine(device_spec: str) -> Machine:
    """The machine as the node on ``device_spec`` (a ``device`` config value) sees it; raises
    ModelError for a device that is not there."""
    import psutil
    import torch

    device = pick_device(device_spec)
    if device.type == "cuda":
        memory = torch.cuda.mem_get_info(device)[1]
    else:
        memory = psutil.virtual_memory().total
    return Machine(device.type, memory, physical_cores())


def node_dtype(cfg: NodeConfig) -> "torch.dtype":
    """The dtype the node on ``cfg`` computes in: ``cfg.dtype``, ``auto`` decided for its device
    (:func:`swarmnode.train.model.pick_dtype`). Raises ModelError for a device that is not there."""
    return pick_dtype(pick_device(cfg.device), cfg.dtype)


def auto_choice(device_spec: str) -> tuple[Machine, AutoChoice]:
    machine = this_machine(device_spec)
    return machine, auto_model(machine.accelerator, machine.memory_bytes, machine.cores)


def resolve_model(spec: str, device_spec: str) -> tuple[str, str | None]:
    """``spec`` as the loader takes it: ``auto`` becomes the catalogue name picked for this
    machine, an alias its catalogue name; anything else is unchanged. The second item says why
    ``auto`` chose (None when it did not)."""
    if spec == AUTO:
        choice = auto_choice(device_spec)[1]
        return choice.name, choice.reason
    entry = catalogue_entry(spec)
    return (entry.name if entry else spec), None


def prepare(cfg: NodeConfig, sources: Mapping[str, str] | None = None) -> NodeConfig:
    """``cfg`` with its model resolved, fetched and converted (a catalogue model not cached yet)
    or checked (any other), ready for the loader; logs the model's name, license and
    attribution. With ``sources`` (the loaded config's), the keys left at their defaults take
    the model's round (:func:`swarmnode.catalogue.model_round`), which the log names. Raises
    ModelError with one line naming the problem."""
    spec, why = resolve_model(cfg.model, cfg.device)
    if why:
        log.info("model auto picked %s: %s", spec, why)
    taken = model_round(spec, sources) if sources is not None else {}
    if taken:
        log.info("the round of %s (docs/configuration.md; set a key to change it): %s", spec,
                 ", ".join(f"{key} = {toml_value(value)}" for key, value in taken.items()))
        cfg = dataclasses.replace(cfg, **taken)
    source = prepare_model(spec, cfg.model_file, node_dtype(cfg))
    if source.entry is not None:
        log.info("model %s: %s", source.name, source.entry.notice)
    else:
        log.info("model %s from %s (not in the catalogue: its license and terms are its own)", source.name,
                 source.path)
    return dataclasses.replace(cfg, model=spec)
