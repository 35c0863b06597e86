"""What modules take from each other, beyond the layers of test_layers.py: no private names,
and the transports' rules without a network stack. Read from the sources; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "swarmnode"
SIMULATOR = Path(__file__).resolve().parent.parent / "benchmarks" / "swarmsim"
# The transports' decisions, plain code that a simulation of many nodes imports beside each
# other: neither network stack (hivemind and py-libp2p cannot share a process), nor trio.
RULES = ("swarmnode.swarm.address", "swarmnode.swarm.transport.pull", "swarmnode.swarm.transport.freshness",
         "swarmnode.swarm.transport.libp2p.announce",
         "swarmnode.swarm.transport.libp2p.spread", "swarmnode.swarm.transport.libp2p.holding",
         "swarmnode.swarm.transport.libp2p.peer_exchange", "swarmnode.swarm.transport.libp2p.sealed",
         "swarmnode.swarm.sealing", "swarmnode.swarm.transport.hivemind.layout",
         "swarmnode.swarm.transport.hivemind.reads", "swarmnode.swarm.transport.room",
         "swarmnode.swarm.transport.joining", "swarmsim.run")
NETWORK_STACKS = {"hivemind", "libp2p", "trio", "multiaddr"}


def is_project(module: str) -> bool:
    return module.split(".")[0] in ("swarmnode", "swarmsim")


def source_of(module: str) -> Path | None:
    """The file of a project module (a package's ``__init__.py``), None for a name that is none."""
    root = SIMULATOR.parent if module.split(".")[0] == "swarmsim" else PACKAGE.parent
    path = root.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def modules() -> dict[str, ast.Module]:
    out = {}
    for package in (PACKAGE, SIMULATOR):
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(package.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = ast.parse(path.read_text())
    return out


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_module_takes_a_private_name_from_another():
    """A name another module needs is public: ``from swarmnode.a import _b``, or ``a._b`` on an
    imported project module, reaches past a module's interface."""
    wrong = []
    for name, tree in modules().items():
        aliases = {}  # local name -> project module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and is_project(node.module):
                for alias in node.names:
                    if private(alias.name):
                        wrong.append(f"{name} imports {node.module}.{alias.name}")
                    elif source_of(f"{node.module}.{alias.name}") is not None:
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                wrong.append(f"{name} imports relatively (from {'.' * node.level}{node.module or ''})")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if is_project(alias.name):
                        wrong += [f"{name} imports {alias.name}" for part in alias.name.split(".") if private(part)]
                        if alias.asname:
                            aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and private(node.attr)):
                wrong.append(f"{name} uses {aliases[node.value.id]}.{node.attr}")
    assert not wrong, "\n".join(wrong)


def test_the_transports_rules_import_no_network_stack():
    trees = modules()
    for rules in RULES:
        seen, todo, stacks = set(), [rules], {}
        while todo:
            module = todo.pop()
            # Importing a module runs its packages' __init__ first.
            for name in {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 2)} - seen:
                seen.add(name)
                for node in ast.walk(trees[name]):
                    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                        imported = [node.module]
                        todo += [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in trees]
                    else:
                        imported = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                    for target in imported:
                        if target.split(".")[0] in NETWORK_STACKS:
                            stacks[target] = name
                        elif target in trees:
                            todo.append(target)
        assert not stacks, f"{rules} imports a network stack: " + ", ".join(f"{t} (in {m})" for t, m in stacks.items())
