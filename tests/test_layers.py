"""The layers import one way: cli, tui -> experiment -> node -> (train, swarm) -> records, config, paths."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "swarmnode"
# What each layer may import from the project, beside itself.
ALLOWED = {
    "base": {"base"},
    "compat": {"base"},
    "train": {"base", "compat"},
    "swarm": {"base", "compat"},
    "node": {"base", "compat", "train", "swarm"},
    "experiment": {"base", "compat", "train", "swarm", "node"},
    "cli": {"base", "compat", "train", "swarm", "node", "experiment", "tui"},
    "tui": {"base", "node"},
}
SUBPACKAGES = set(ALLOWED) - {"base"}


def layer_of(module: str) -> str:
    if module == "swarmnode.__main__":
        return "cli"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else "base"


def project_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m == "swarmnode" or m.startswith("swarmnode.")}


def test_imports_point_one_way():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(("swarmnode", *path.relative_to(PACKAGE).with_suffix("").parts))
        for imported in project_imports(path):
            if imported == "swarmnode" or layer_of(imported) in ALLOWED[layer_of(module)] | {layer_of(module)}:
                continue
            wrong.append(f"{module} imports {imported}")
    assert not wrong, "\n".join(wrong)


def test_base_modules_import_no_layer():
    """records, config and paths sit under every layer, so the wire format needs no task loader."""
    for name in ("records", "config", "paths"):
        assert {layer_of(m) for m in project_imports(PACKAGE / f"{name}.py")} <= {"base"}
