"""Every distribution the package imports is declared in pyproject.toml: an import that works
here only because another dependency happens to pull it in breaks an install where it does not.
Read from the sources (every import, at module level or inside a function); nothing is imported."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    """The distributions pyproject.toml names: dependencies and every extra's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {_normalized(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r).group()) for r in requirements}


def imported_top_levels() -> dict[str, list[str]]:
    """Top-level module name -> the package's files that import it (absolute imports only)."""
    out: dict[str, list[str]] = {}
    for path in sorted((ROOT / "swarmnode").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                out.setdefault(name.split(".")[0], []).append(rel)
    return out


def test_every_imported_distribution_is_declared():
    distributions = packages_distributions()
    wanted = declared()
    missing = []
    for top, files in sorted(imported_top_levels().items()):
        if top in sys.stdlib_module_names or top in ("swarmnode", "__future__"):
            continue
        provided = {_normalized(d) for d in distributions.get(top, [])}
        if not provided and _normalized(top) in wanted:  # declared for other Pythons (tomli)
            continue
        if not provided:
            missing.append(f"{top} (imported by {files[0]}): no installed distribution provides it")
        elif not provided & wanted:
            missing.append(f"{top} (imported by {files[0]}): declare {' or '.join(sorted(provided))}")
    assert not missing, "add to pyproject.toml's dependencies:\n" + "\n".join(missing)


def test_the_check_sees_imports_inside_functions_and_knows_its_names():
    imports = imported_top_levels()
    assert "swarmnode/node/doctor.py" in imports["huggingface_hub"], "an import inside a function"
    assert {"torch", "hivemind", "libp2p"} <= declared() and "json" in sys.stdlib_module_names
