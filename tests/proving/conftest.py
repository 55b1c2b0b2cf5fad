"""Prover fixtures: one Coq session per module, one HOL Light toplevel per test session.

HOL Light takes 70-90 s to load its library. When any selected test needs it, loading starts in
the background as soon as collection ends, and those tests are moved to the end of the run, so
the load overlaps every other test instead of adding to them.
"""

from __future__ import annotations

import atexit
import threading

import pytest

from aitp.proving.backends import backend_available

_hol: dict[str, object] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hol_light: needs the loaded HOL Light toplevel (loaded once per session)")


def _load_hol() -> None:
    from aitp.proving.hol_light.env import HolLightServer

    try:
        _hol["server"] = HolLightServer()
        atexit.register(_hol["server"].close)
    except Exception as exc:  # reported by the fixture, in the tests that need it
        _hol["error"] = exc


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    hol_items = [item for item in items if item.get_closest_marker("hol_light")]
    if not hol_items:
        return
    if backend_available("hol-light")[0] and "thread" not in _hol:
        _hol["thread"] = threading.Thread(target=_load_hol, daemon=True)
        _hol["thread"].start()
    others = [item for item in items if not item.get_closest_marker("hol_light")]
    items[:] = others + hol_items


def pytest_unconfigure(config: pytest.Config) -> None:
    server = _hol.get("server")
    if server is not None:
        server.close()


@pytest.fixture(scope="session")
def hol_server():
    """The loaded HOL Light toplevel (skips when HOL Light is not installed)."""
    ok, why = backend_available("hol-light")
    if not ok:
        pytest.skip(why)
    if "thread" not in _hol:
        _hol["thread"] = threading.Thread(target=_load_hol, daemon=True)
        _hol["thread"].start()
    _hol["thread"].join()
    if "error" in _hol:
        pytest.fail(f"HOL Light failed to load: {_hol['error']}")
    return _hol["server"]


@pytest.fixture(scope="session")
def coq_theorem_home(tmp_path_factory):
    """An aitp home where the `coq-stdlib` set is extracted once per test session (it takes ~15-40 s)."""
    from tests.proving.cases import require

    require("coq")
    from aitp.proving.data.theorems import load_theorem_set

    home = tmp_path_factory.mktemp("coq-theorems")
    load_theorem_set("coq-stdlib", home=home)
    return home


@pytest.fixture(scope="session")
def coq_trace_lake(coq_theorem_home, tmp_path_factory):
    """A real lake of Coq searches: Bool train theorems (explored), valid ones, a valid search written
    with a wrong `train` label, and a train proof that was never re-checked (search with checking off)."""
    from dataclasses import replace

    from aitp.proving.coq.env import CoqEnv
    from aitp.proving.data.theorems import load_theorem_set
    from aitp.proving.learning import commit_traces, search_theorems
    from aitp.proving.models.prover_models import ProverModels
    from aitp.proving.models.ranked_policy import Exploration
    from aitp.proving.search import Budget, SearchConfig, make_search

    library = load_theorem_set("coq-stdlib", home=coq_theorem_home)
    home = tmp_path_factory.mktemp("trace-lake")
    bool_train = [t for t in library.split("train") if t.module == "Coq.Bool.Bool"]
    train, unchecked = bool_train[6:30], bool_train[30:31]
    valid = [t for t in library.split("valid") if t.module == "Coq.Bool.Bool"][:2]
    models = ProverModels.untrained("coq", library)
    config = SearchConfig(budget=Budget(4, 20.0, 40.0), tactics_per_goal=8, tactic_timeout=2.0)
    with CoqEnv(tactic_timeout=2.0) as env:
        env.set_premises(library.premise_map())
        explore = models.policy(library, Exploration(1.0, seed=1))
        searched = search_theorems(env, train, make_search("bestfs", config), explore, "e", 1, models.version)
        commit_traces(home, "e", 1, searched, "train")
        evaluated = search_theorems(env, valid, make_search("bestfs", config), models.policy(library), "e", 1)
        commit_traces(home, "e", 1, evaluated, "valid")
        evaluated.rows = {
            t: [{**r, "split": "train", "iteration": 2} if "split" in r else {**r, "iteration": 2} for r in rows]
            for t, rows in evaluated.rows.items()
        }
        commit_traces(home, "e", 2, evaluated, "mislabelled")
        no_check = make_search("bestfs", replace(config, check_proofs=False))
        unverified = search_theorems(env, unchecked, no_check, models.policy(library), "e", 2)
        commit_traces(home, "e", 2, unverified, "unchecked")
    return home, library, searched, evaluated, unverified
