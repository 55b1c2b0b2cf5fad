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


@pytest.fixture(scope="session")
def bool_theorems(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSONL theorem set of 6 train and 6 valid theorems of Coq's Bool library (extracted once, ~10 s)."""
    from tests.proving.cases import require

    require("coq")
    from aitp.proving.data.theorem_set import TheoremSet
    from aitp.proving.data.theorems import load_theorem_set

    root = tmp_path_factory.mktemp("bool-theorems")
    library = load_theorem_set("coq-stdlib", home=root)
    pick = [t for t in library.split("train") if t.module == "Coq.Bool.Bool"][10:16]
    pick += [t for t in library.split("valid") if t.module == "Coq.Bool.Bool"][:6]
    small = TheoremSet("bool-mini", "coq", pick, library.premise_names, library.version)
    path = root / "bool-mini.jsonl"
    small.save(path)
    return path
