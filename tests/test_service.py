"""The launchd agent and systemd unit that `swarmnode service` installs (content, paths, commands)."""

from __future__ import annotations

import argparse
import configparser
import os
import plistlib
import shlex
import subprocess
from pathlib import Path

import pytest

from swarmnode.cli import service as service_cli
from swarmnode.config import ConfigError
from swarmnode.node import service


class FakeRunner:
    """Records service-manager commands; answers each with ``returncode``."""

    def __init__(self, returncode: int = 0, stdout: str = "", fail_first: bool = False):
        self.calls: list[list[str]] = []
        self.returncode, self.stdout, self.fail_first = returncode, stdout, fail_first

    def __call__(self, cmd):
        self.calls.append(list(cmd))
        code = 5 if (self.fail_first and len(self.calls) == 1) else self.returncode
        return subprocess.CompletedProcess(cmd, code, stdout=self.stdout, stderr="boom" if code else "")


@pytest.fixture
def tools(monkeypatch):
    """Pretend launchctl and systemctl exist."""
    monkeypatch.setattr(service.shutil, "which", lambda name: f"/usr/bin/{name}")


def test_start_command_uses_the_script_beside_the_interpreter(tmp_path):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "swarmnode").write_text("#!/bin/sh\n", encoding="utf-8")
    cmd = service.start_command(Path("/h/node"), Path("/h/c.toml"), executable=str(bin_dir / "python"))
    assert cmd == [str(bin_dir / "swarmnode"), "start", "--home", "/h/node", "--config", "/h/c.toml"]


def test_start_command_falls_back_to_python_dash_m(tmp_path):
    python = tmp_path / "python"
    assert service.start_command(None, None, executable=str(python)) == [str(python), "-m", "swarmnode", "start"]


def test_launchd_plist_restarts_after_a_crash_and_logs_to_the_log_dir(tmp_path):
    cmd = ["/opt/sn/bin/swarmnode", "start", "--home", "/Users/a b/node"]
    plist = plistlib.loads(service.launchd_plist(cmd, tmp_path / "Logs"))
    assert plist["Label"] == "org.swarmnode.node"
    assert plist["ProgramArguments"] == cmd
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["StandardOutPath"] == str(tmp_path / "Logs" / "swarmnode.out.log")
    assert plist["StandardErrorPath"] == str(tmp_path / "Logs" / "swarmnode.err.log")
    assert plist["ThrottleInterval"] > 0


def test_systemd_unit_runs_the_exact_command_and_restarts_on_failure():
    cmd = ["/home/u/.local/bin/swarmnode", "start", "--home", "/home/u/my node", "--config", "/home/u/50%.toml"]
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read_string(service.systemd_unit(cmd))
    svc = parser["Service"]
    assert svc["Restart"] == "on-failure"
    assert svc["KillMode"] == "mixed"  # the node stops its own helpers
    assert svc["Type"] == "simple"
    assert parser["Install"]["WantedBy"] == "default.target"
    exec_start = svc["ExecStart"]
    assert '"/home/u/my node"' in exec_start and "50%%.toml" in exec_start
    assert shlex.split(exec_start.replace("%%", "%")) == cmd


@pytest.mark.parametrize("arg, quoted", [
    ("plain/path-1.0", "plain/path-1.0"),
    ("a b", '"a b"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("$HOME", "$$HOME"),
    ("", '""'),
])
def test_systemd_quote(arg, quoted):
    assert service.systemd_quote(arg) == quoted


def test_paths_of_the_service_files(tmp_path):
    assert service.launchd_path(tmp_path) == tmp_path / "Library/LaunchAgents/org.swarmnode.node.plist"
    assert service.systemd_path(tmp_path, {}) == tmp_path / ".config/systemd/user/swarmnode.service"
    assert service.systemd_path(tmp_path, {"XDG_CONFIG_HOME": "/x"}) == Path("/x/systemd/user/swarmnode.service")


def test_linux_install_writes_the_unit_then_enables_and_restarts(tmp_path, tools):
    manager = service.manager_for("linux", ["/bin/swarmnode", "start"], tmp_path, {}, uid=1000)
    runner = FakeRunner()
    service.install(manager, run=runner)
    assert manager.path.read_text(encoding="utf-8") == service.systemd_unit(["/bin/swarmnode", "start"])
    assert runner.calls == [["systemctl", "--user", "daemon-reload"],
                            ["systemctl", "--user", "enable", "swarmnode.service"],
                            ["systemctl", "--user", "restart", "swarmnode.service"]]


def test_linux_install_failure_names_the_command_and_the_file(tmp_path, tools):
    manager = service.manager_for("linux", ["/bin/swarmnode", "start"], tmp_path, {}, uid=1000)
    with pytest.raises(service.ServiceError, match="daemon-reload.*boom.*swarmnode.service"):
        service.install(manager, run=FakeRunner(returncode=1))


def test_macos_install_ignores_bootout_of_an_agent_not_loaded(tmp_path, tools, monkeypatch):
    monkeypatch.setattr(service, "log_dir", lambda: tmp_path / "Logs")
    manager = service.manager_for("darwin", ["/bin/swarmnode", "start"], tmp_path, {}, uid=501)
    runner = FakeRunner(fail_first=True)
    service.install(manager, run=runner)
    assert manager.path == tmp_path / "Library/LaunchAgents/org.swarmnode.node.plist"
    assert plistlib.loads(manager.path.read_bytes())["ProgramArguments"] == ["/bin/swarmnode", "start"]
    assert (tmp_path / "Logs").is_dir()
    assert runner.calls == [["launchctl", "bootout", "gui/501/org.swarmnode.node"],
                            ["launchctl", "bootstrap", "gui/501", str(manager.path)]]


def test_uninstall_stops_and_removes(tmp_path, tools):
    manager = service.manager_for("linux", ["/bin/swarmnode", "start"], tmp_path, {}, uid=1000)
    runner = FakeRunner()
    assert service.uninstall(manager, run=runner) is False
    assert runner.calls == []
    service.install(manager, run=runner)
    runner.calls.clear()
    assert service.uninstall(manager, run=runner) is True
    assert not manager.path.exists()
    assert runner.calls[0] == ["systemctl", "--user", "disable", "--now", "swarmnode.service"]


def test_status_reports_installation_and_manager_state(tmp_path, tools):
    manager = service.manager_for("darwin", [], tmp_path, {}, uid=501)
    assert "not installed" in service.status(manager, run=FakeRunner())
    manager.path.parent.mkdir(parents=True)
    manager.path.write_bytes(b"x")
    report = service.status(manager, run=FakeRunner(stdout="gui/501/org.swarmnode.node = {\n\tstate = running\n"
                                                          "\tpath = x\n\tpid = 4242\n}"))
    assert f"installed: {manager.path}" in report
    assert "state = running; pid = 4242" in report


def test_missing_service_manager_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(service.shutil, "which", lambda name: None)
    manager = service.manager_for("linux", ["/bin/swarmnode", "start"], tmp_path, {}, uid=1000)
    with pytest.raises(service.ServiceError, match="systemctl not found"):
        service.install(manager, run=FakeRunner())


def test_unsupported_platform(tmp_path):
    with pytest.raises(service.ServiceError, match="macOS.*Linux"):
        service.manager_for("win32", [], tmp_path, {}, uid=0)


def _cli(argv):
    parser = argparse.ArgumentParser(prog="swarmnode")
    service_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_install_puts_absolute_home_into_the_unit(tmp_path, tools, monkeypatch, capsys):
    monkeypatch.setattr(service.sys, "platform", "linux")
    monkeypatch.setattr(service.Path, "home", classmethod(lambda cls: tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setattr(service, "_run", FakeRunner())
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("SWARMNODE_")]:
        monkeypatch.delenv(name)
    assert _cli(["service", "install", "--home", "node"]) == 0
    unit = (tmp_path / "cfg/systemd/user/swarmnode.service").read_text(encoding="utf-8")
    assert f"start --home {tmp_path / 'node'}" in unit
    assert "installed the systemd user unit" in capsys.readouterr().out
    # --relay installs `swarmnode relay` beside it; --relay again finds and removes only that one.
    assert _cli(["service", "install", "--relay", "--home", "relay"]) == 0
    relay_unit = (tmp_path / "cfg/systemd/user/swarmnode-relay.service").read_text(encoding="utf-8")
    assert f"relay --home {tmp_path / 'relay'}" in relay_unit
    assert _cli(["service", "uninstall", "--relay"]) == 0
    assert not (tmp_path / "cfg/systemd/user/swarmnode-relay.service").exists()
    assert (tmp_path / "cfg/systemd/user/swarmnode.service").exists()


def test_cli_install_refuses_a_config_that_does_not_load(tmp_path, tools, monkeypatch):
    monkeypatch.setattr(service.sys, "platform", "linux")
    monkeypatch.setattr(service.Path, "home", classmethod(lambda cls: tmp_path))
    bad = tmp_path / "bad.toml"
    bad.write_text("questions = 'many'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="questions"):
        _cli(["service", "install", "--config", str(bad)])
    assert not (tmp_path / ".config").exists()


def test_cli_without_systemctl_exits_1_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(service.sys, "platform", "linux")
    monkeypatch.setattr(service.Path, "home", classmethod(lambda cls: tmp_path))
    monkeypatch.setattr(service.shutil, "which", lambda name: None)
    assert _cli(["service", "install", "--home", str(tmp_path / "n")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("swarmnode: systemctl not found") and err.count("\n") == 1


def test_relay_service_runs_swarmnode_relay_under_its_own_names(tmp_path, tools):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "swarmnode").write_text("#!/bin/sh\n")
    cmd = service.start_command(Path("/h/relay"), None, executable=str(bin_dir / "python"), kind=service.RELAY)
    assert cmd == [str(bin_dir / "swarmnode"), "relay", "--home", "/h/relay"]
    manager = service.manager_for("linux", cmd, tmp_path, {}, uid=1000, kind=service.RELAY)
    runner = FakeRunner()
    service.install(manager, run=runner)
    assert manager.path == tmp_path / ".config/systemd/user/swarmnode-relay.service"
    assert "relay --home /h/relay" in manager.path.read_text(encoding="utf-8")
    assert ["systemctl", "--user", "restart", "swarmnode-relay.service"] in runner.calls
    # The node's unit is another file: installing a relay leaves a node's service alone.
    assert not service.systemd_path(tmp_path, {}).exists()
    mac = service.manager_for("darwin", cmd, tmp_path, {}, uid=501, kind=service.RELAY)
    assert mac.path.name == "org.swarmnode.relay.plist" and mac.uninstall == [
        ["launchctl", "bootout", "gui/501/org.swarmnode.relay"]]
