"""The deployment examples in deploy/: systemd units that systemd itself accepts, with the
stop settings a graceful consumer needs, and a Procfile whose commands exist."""

from __future__ import annotations

import configparser
import shutil
import subprocess

import pytest
from django.core.management import get_commands

from studyqueue.conf import SETTINGS
from tests.helpers import ROOT

DEPLOY = ROOT / "deploy"
UNITS = ("studyqueue-web.service", "studyqueue-consumer@.service")


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parser.read(DEPLOY / "systemd" / name)
    return parser


@pytest.mark.parametrize("name", UNITS)
def test_units_restart_and_stop_with_sigterm_after_the_grace_period(name):
    service = unit(name)["Service"]
    assert service["KillSignal"] == "SIGTERM"
    assert service["Restart"] in ("always", "on-failure")
    grace = SETTINGS["SHUTDOWN_GRACE_SECONDS"].default
    assert int(service["TimeoutStopSec"]) > grace, "systemd would kill it mid-grace"


def test_the_consumer_unit_names_each_instance_and_runs_runconsumer():
    start = unit("studyqueue-consumer@.service")["Service"]["ExecStart"]
    assert "manage.py runconsumer" in start and "--worker-id %H:%i" in start


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_accepts_the_units(tmp_path):
    """``systemd-analyze verify`` on the units, with the example paths pointed at this
    checkout (it checks that the programs exist)."""
    env = tmp_path / "env"
    shutil.copy(DEPLOY / "env.example", env)
    paths = []
    for name in UNITS:
        text = (DEPLOY / "systemd" / name).read_text()
        text = text.replace("/srv/studyqueue", str(ROOT)).replace("/etc/studyqueue/env", str(env))
        text = text.replace("User=studyqueue", "User=root")
        target = tmp_path / name.replace("@.", "@1.")  # a template is verified as an instance
        target.write_text(text)
        paths.append(str(target))
    result = subprocess.run(
        ["systemd-analyze", "verify", *paths], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_the_procfile_runs_commands_that_exist():
    processes = dict(
        line.split(": ", 1) for line in (DEPLOY / "Procfile").read_text().splitlines() if line
    )
    assert set(processes) == {"web", "consumer", "release"}
    assert "project.wsgi:application" in processes["web"]
    commands = get_commands()
    for command in ("runconsumer", "migrate", "collectstatic"):
        assert command in commands
    assert "manage.py runconsumer" in processes["consumer"]


def test_the_example_environment_names_real_settings():
    names = {
        line.split("=", 1)[0]
        for line in (DEPLOY / "env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    studyqueue = {n.removeprefix("STUDYQUEUE_") for n in names if n.startswith("STUDYQUEUE_")}
    assert studyqueue - {"ENV"} <= set(SETTINGS), studyqueue - set(SETTINGS)
