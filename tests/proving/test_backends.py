"""The backend registry: one record per backend, sessions forked from the loaded prover this host serves (so local
workers load HOL Light once per run), and no backend named outside its own package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from aitp.proving.backends import BACKENDS, open_env, serving_address
from tests.proving.cases import CASES

ROOT = Path(__file__).resolve().parents[2]


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.hol_light
def test_a_session_forks_from_the_prover_serving_this_host(hol_server):
    case = CASES["hol-light"]
    with open_env("hol-light", tactic_timeout=2.0, address=hol_server.path) as env:
        assert env.server.proc is None  # no toplevel of its own: no second 70-90 s load
        assert _parent(env._session.pid) == hol_server.proc.pid
        assert env.run_tactic(env.open(case.theorem), case.first_tactic).outcome == "goals"


def test_a_fast_starting_backend_serves_no_address():
    assert serving_address("coq") is None


def test_the_registry_loads_no_prover_session_until_one_opens():
    code = "import sys, aitp.proving.backends; print(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert "aitp.proving.backends" in loaded
    assert not loaded & {"aitp.proving.coq.env", "aitp.proving.hol_light.env"}  # coqidetop's, HOL Light's sessions


def test_each_theorem_set_belongs_to_one_backend_and_its_default_comes_first():
    owners = [(s.name, b.name) for b in BACKENDS.values() for s in b.theorem_sets]
    assert len({name for name, _ in owners}) == len(owners)
    assert {b.name: b.default_theorem_set for b in BACKENDS.values()} == {
        "coq": "coq-stdlib",
        "hol-light": "hol-core",
        "leandojo": None,
    }


def _backend_names_in(path: Path) -> list[str]:
    """String constants of a module that are exactly a backend's name."""
    tree = ast.parse(path.read_text())
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in BACKENDS]


def test_only_the_backend_packages_name_a_backend():
    # a table keyed by backend names, or a test for one by name, belongs in the backend's record
    allowed = {
        "aitp/proving/config.py",  # the config schema: `backend: Literal[...]` and its default
        "aitp/cli/prove.py",  # `aitp prove --backend`'s default
    }
    packages = tuple(f"aitp/proving/{b.replace('-', '_')}/" for b in BACKENDS)
    found = {
        str(p.relative_to(ROOT)): names
        for p in sorted((ROOT / "aitp").rglob("*.py"))
        if not str(p.relative_to(ROOT)).startswith(packages) and (names := _backend_names_in(p))
    }
    assert set(found) <= allowed, found
