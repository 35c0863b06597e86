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


def test_every_package_says_its_job_and_what_it_may_import():
    """Each package's docstring ends with ``May import: <layers>.``, the layers ALLOWED gives it
    beside its own (``nothing`` for a package of data)."""
    order = list(ALLOWED)
    wrong = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        package = ".".join(("swarmnode", *init.parent.relative_to(PACKAGE).parts))
        if package == "swarmnode":  # the top: every layer is inside it
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        said = [line for line in doc.splitlines() if "May import:" in line]
        if not said:
            wrong.append(f"{package}: no docstring with 'May import: ...'")
            continue
        text = " ".join(doc[doc.index("May import:") + len("May import:"):].split())
        named = [word.strip(",.") for word in text.split("(")[0].split()]
        layer = layer_of(package)
        expected = sorted(ALLOWED[layer] - {layer}, key=order.index) if layer in SUBPACKAGES else ["nothing"]
        if named != expected:
            wrong.append(f"{package} says it may import {named}, tests/test_layers.py allows {expected}")
    assert not wrong, "\n".join(wrong)
