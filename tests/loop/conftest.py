"""One real Prefect server for the loop tests, and one uninterrupted miniature run that several tests read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.loop.helpers import env, run_aitp, write_config


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory):
    from aitp.services import start_prefect, stop

    service = start_prefect(tmp_path_factory.mktemp("prefect-server"))
    yield service.url
    stop(service)


@pytest.fixture(scope="session")
def baseline(tmp_path_factory: pytest.TempPathFactory, prefect_server: str) -> tuple[Path, Path, str]:
    """A 2-iteration miniature run to the end through the real server: (home, config, stdout)."""
    root = tmp_path_factory.mktemp("baseline")
    config = write_config(root / "mini.yaml")
    home = root / "home"
    done = run_aitp(["run", "--config", str(config), "--home", str(home), "--no-report"], env(prefect_server))
    assert done.returncode == 0, done.stdout + done.stderr
    return home, config, done.stdout
