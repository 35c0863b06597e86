"""docs/architecture.md names every module of swarmnode/, read from the file tree."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "swarmnode"


def _names(module: str) -> tuple[str, ...]:
    """How the doc may name a module: a package by its folder (`cli/` or **cli/**), any other
    module by its path under swarmnode/ (`node/round.py`)."""
    if module.endswith("/__init__.py"):
        folder = module.removesuffix("__init__.py")
        return f"`{folder}`", f"**{folder}**"
    return (f"`{module}`",)


def test_every_module_is_in_the_architecture_doc():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    modules = [path.relative_to(PACKAGE).as_posix() for path in sorted(PACKAGE.rglob("*.py"))]
    missing = [m for m in modules if m != "__init__.py" and not any(name in doc for name in _names(m))]
    assert not missing, "docs/architecture.md, 'The modules', lacks: " + ", ".join(missing)
