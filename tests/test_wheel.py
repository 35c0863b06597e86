"""The built wheel holds what `pipx install` / `uv tool install` users need."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _build_wheel(tmp_path: Path) -> Path:
    """Build from a copy of the sources so build/ and *.egg-info never land in the working tree."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "LICENSE", "README.md"):
        if (ROOT / name).is_file():
            shutil.copy(ROOT / name, src / name)
    for package in ("swarmnode",):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    str(src), "-w", str(out)], check=True, capture_output=True, text=True)
    [wheel] = out.glob("swarmnode-*.whl")
    return wheel


@pytest.mark.slow
def test_wheel_contents(tmp_path):
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
        metadata = zf.read(f"{dist_info}/METADATA").decode()
    assert "swarmnode/data/tasks.toml" in names
    assert "swarmnode/data/bootstrap.txt" in names
    for layer in ("cli", "node", "swarm", "swarm/transport", "train", "experiment", "tui"):
        assert f"swarmnode/{layer}/__init__.py" in names, f"subpackage swarmnode.{layer} is missing from the wheel"
    assert "swarmnode/tui/app.tcss" in names, "the dashboard's stylesheet is missing from the wheel"
    assert not any(n.startswith("tui/") for n in names), "the checkout's thin tui/ entry point must not be installed"
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
    assert "swarmnode = swarmnode.cli:main" in entry_points
    assert "Requires-Dist: psutil" in metadata


def test_dockerfile_settings_are_config_keys_and_its_context_holds_the_package():
    """The Dockerfile cannot be built here (no Docker daemon): check what can drift by reading it."""
    from swarmnode.config import coerce

    dockerfile = (ROOT / "packaging" / "Dockerfile").read_text(encoding="utf-8")
    env = dict(re.findall(r"\b(SWARMNODE_[A-Z_]+)=(\S+)", dockerfile))
    assert set(env) >= {"SWARMNODE_HOME", "SWARMNODE_CACHE", "SWARMNODE_LISTEN"}
    for name, value in env.items():
        if name != "SWARMNODE_CACHE":  # read by swarmnode.paths, not a config key
            coerce(name[len("SWARMNODE_"):].lower(), value, name, from_text=True)
    assert 'ENTRYPOINT ["swarmnode", "start"]' in dockerfile
    ignore = (ROOT / "packaging" / "Dockerfile.dockerignore").read_text(encoding="utf-8").split()
    for needed in ("pyproject.toml", "swarmnode"):
        assert f"!{needed}" in ignore
