"""``swarmnode service install|uninstall|status``: run the node in the background for the user.

macOS gets a launchd agent (``~/Library/LaunchAgents/org.swarmnode.node.plist``), Linux a
systemd user unit (``~/.config/systemd/user/swarmnode.service``). Both run the exact
``swarmnode start`` command line of this installation (absolute paths, the user's ``--home``
and ``--config``), start at login and restart the node after a crash, not after a clean stop.
``swarmnode service install --relay`` installs ``swarmnode relay`` the same way under its own
names (:data:`RELAY`), so one machine can run both.

The files are produced by pure functions (:func:`launchd_plist`, :func:`systemd_unit`) so they
can be tested anywhere; ``launchctl`` and ``systemctl`` are only called by the commands, through
a runner that tests replace.
"""

from __future__ import annotations

import plistlib
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import platformdirs

from swarmnode.paths import APP

LABEL = "org.swarmnode.node"
UNIT_NAME = "swarmnode.service"
# Seconds launchd waits before restarting a node that crashed, so a node that fails at
# start-up (bad network, full disk) does not spin.
RESTART_DELAY_S = 10

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]


@dataclass(frozen=True)
class ServiceKind:
    """Which ``swarmnode`` subcommand a service runs, and the names it is installed under."""

    subcommand: str
    label: str       # launchd
    unit: str        # systemd
    description: str


NODE = ServiceKind("start", LABEL, UNIT_NAME, "a peer-to-peer RL swarm node")
RELAY = ServiceKind("relay", "org.swarmnode.relay", "swarmnode-relay.service",
                    "a network-only public peer of an RL swarm (swarmnode relay)")


class ServiceError(RuntimeError):
    """The service manager is missing or refused; ``str()`` says what to do."""


def start_command(home: Path | None, config: Path | None, executable: str | None = None,
                  kind: ServiceKind = NODE) -> list[str]:
    """The ``swarmnode start`` (or ``kind``'s subcommand) command line the service runs, with absolute paths.

    The ``swarmnode`` script installed beside the running interpreter is used (pipx, uv tool
    and venv installs all put it there); without one, ``python -m swarmnode``.
    """
    python = Path(executable or sys.executable)
    script = python.parent / "swarmnode"
    cmd = [str(script)] if script.is_file() else [str(python), "-m", "swarmnode"]
    cmd.append(kind.subcommand)
    if home is not None:
        cmd += ["--home", str(home)]
    if config is not None:
        cmd += ["--config", str(config)]
    return cmd


def log_dir() -> Path:
    """Where the launchd agent sends the node's stdout and stderr."""
    return Path(platformdirs.user_log_dir(APP, appauthor=False))


def launchd_path(user_home: Path, kind: ServiceKind = NODE) -> Path:
    return user_home / "Library" / "LaunchAgents" / f"{kind.label}.plist"


def systemd_path(user_home: Path, environ: Mapping[str, str], kind: ServiceKind = NODE) -> Path:
    config_home = environ.get("XDG_CONFIG_HOME") or str(user_home / ".config")
    return Path(config_home) / "systemd" / "user" / kind.unit


def launchd_plist(command: Sequence[str], logs: Path, kind: ServiceKind = NODE) -> bytes:
    """A launchd agent that starts ``command`` at login and again whenever it exits with an error."""
    return plistlib.dumps({
        "Label": kind.label,
        "ProgramArguments": list(command),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": RESTART_DELAY_S,
        "StandardOutPath": str(logs / f"{_log_stem(kind)}.out.log"),
        "StandardErrorPath": str(logs / f"{_log_stem(kind)}.err.log"),
        "EnvironmentVariables": {"PYTHONUNBUFFERED": "1"},
    })


def _log_stem(kind: ServiceKind) -> str:
    return kind.unit.removesuffix(".service")


_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_@%$+=:,./-]+")


def systemd_quote(arg: str) -> str:
    """One ``ExecStart`` word: quoted when needed, with systemd's ``%`` and ``$`` expansions escaped."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if arg and _SYSTEMD_PLAIN.fullmatch(arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_unit(command: Sequence[str], kind: ServiceKind = NODE) -> str:
    """A systemd user unit that runs ``command`` at login and restarts it after a failure.

    ``KillMode=mixed``: a stop signals the node alone, which stops its helpers (hivemind's DHT
    process and p2pd) in order; systemd's default would signal them at once, and the node
    would see its DHT die under it. Whatever is left when the node exits is killed."""
    return "\n".join([
        "[Unit]",
        f"Description=swarmnode: {kind.description}",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + " ".join(systemd_quote(a) for a in command),
        "Restart=on-failure",
        "KillMode=mixed",
        f"RestartSec={RESTART_DELAY_S}",
        "Environment=PYTHONUNBUFFERED=1",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ])


@dataclass(frozen=True)
class Manager:
    """How one platform installs, removes and inspects the service."""

    name: str
    tool: str
    path: Path
    content: bytes
    install: list[list[str]]
    uninstall: list[list[str]]
    status: list[str]
    logs_hint: str


def manager_for(platform: str, command: Sequence[str], user_home: Path, environ: Mapping[str, str],
                uid: int, kind: ServiceKind = NODE) -> Manager:
    """The service definition and the service-manager commands for ``platform`` (``sys.platform``)."""
    if platform == "darwin":
        logs = log_dir()
        domain = f"gui/{uid}"
        path = launchd_path(user_home, kind)
        target = f"{domain}/{kind.label}"
        return Manager(
            name="launchd agent", tool="launchctl", path=path, content=launchd_plist(command, logs, kind),
            # bootout first so a reinstall replaces a loaded agent; its failure (not loaded) is ignored.
            install=[["launchctl", "bootout", target], ["launchctl", "bootstrap", domain, str(path)]],
            uninstall=[["launchctl", "bootout", target]],
            status=["launchctl", "print", target],
            logs_hint=f"logs: {logs}/{_log_stem(kind)}.err.log",
        )
    if platform.startswith("linux"):
        ctl = ["systemctl", "--user"]
        return Manager(
            name="systemd user unit", tool="systemctl", path=systemd_path(user_home, environ, kind),
            content=systemd_unit(command, kind).encode(),
            # restart (not start) so a reinstall picks up a changed command line.
            install=[ctl + ["daemon-reload"], ctl + ["enable", kind.unit], ctl + ["restart", kind.unit]],
            uninstall=[ctl + ["disable", "--now", kind.unit]],
            status=ctl + ["status", "--no-pager", kind.unit],
            logs_hint=f"logs: journalctl --user -u {kind.unit} -f (and <home>/logs); to keep it running "
                      "after you log out: loginctl enable-linger $USER",
        )
    raise ServiceError(f"swarmnode service supports macOS (launchd) and Linux (systemd); on {platform} run "
                       "`swarmnode start` in a terminal, or use packaging/Dockerfile")


def _run(cmd: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True)


def _require_tool(manager: Manager) -> None:
    if shutil.which(manager.tool) is None:
        raise ServiceError(f"{manager.tool} not found: this system does not run a {manager.name.split()[0]} "
                           f"session for your user; run `swarmnode start` in a terminal or under your own "
                           "supervisor, or use packaging/Dockerfile")


def install(manager: Manager, run: Runner | None = None) -> None:
    """Write the service file and (re)start the service; ``run`` defaults to subprocess."""
    run = run or _run
    _require_tool(manager)
    manager.path.parent.mkdir(parents=True, exist_ok=True)
    if manager.tool == "launchctl":
        log_dir().mkdir(parents=True, exist_ok=True)  # launchd does not create the log directory
    manager.path.write_bytes(manager.content)
    for i, cmd in enumerate(manager.install):
        result = run(cmd)
        ignorable = manager.tool == "launchctl" and i == 0  # bootout of an agent that was not loaded
        if result.returncode != 0 and not ignorable:
            raise ServiceError(f"`{' '.join(cmd)}` failed: {(result.stderr or result.stdout).strip()}; "
                               f"the service file is at {manager.path} (`swarmnode service uninstall` removes it)")


def uninstall(manager: Manager, run: Runner | None = None) -> bool:
    """Stop the service and remove its file; False if it was not installed."""
    run = run or _run
    if not manager.path.exists():
        return False
    _require_tool(manager)
    for cmd in manager.uninstall:
        run(cmd)  # a service that is installed but not running fails to stop: nothing to undo
    manager.path.unlink()
    if manager.tool == "systemctl":
        run(["systemctl", "--user", "daemon-reload"])
    return True


def status(manager: Manager, run: Runner | None = None) -> str:
    """A few lines: whether the file is installed and what the service manager says of it."""
    run = run or _run
    if not manager.path.exists():
        return f"not installed ({manager.path} does not exist); install with `swarmnode service install`"
    lines = [f"installed: {manager.path}"]
    if shutil.which(manager.tool) is None:
        lines.append(f"{manager.tool} not found: cannot ask whether the node is running")
    else:
        result = run(manager.status)
        lines.append(f"{manager.tool}: " + (_summary(manager, result.stdout or result.stderr)
                                            or f"exit {result.returncode}"))
    lines.append(manager.logs_hint)
    return "\n".join(lines)


def _summary(manager: Manager, text: str) -> str:
    """The manager's report, cut to the lines that say whether the node runs (launchctl prints pages)."""
    if manager.tool == "launchctl":
        keep = [line.strip() for line in text.splitlines()
                if line.strip().startswith(("state =", "pid =", "last exit code ="))]
        return "; ".join(keep) if keep else text.strip()
    return text.strip()
