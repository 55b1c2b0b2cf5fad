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
    from aitp.proving.hol_light import HolLightServer

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
    from aitp.proving.theorems import load_theorem_set

    home = tmp_path_factory.mktemp("coq-theorems")
    load_theorem_set("coq-stdlib", home=home)
    return home
