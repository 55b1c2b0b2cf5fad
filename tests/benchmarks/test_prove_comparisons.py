"""The equal-budget proving comparisons take a backend (default coq) and refuse one without a proving loop."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ("prove_searches", "prove_generative")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", SCRIPTS)
def test_backend_defaults_to_coq_and_takes_hol_light(name):
    script = _script(name)
    assert script.parse_args([]).backend == "coq"  # the Coq tables' command is unchanged
    args = script.parse_args(["--backend", "hol-light", "--train", "60", "--valid", "40"])
    assert (args.backend, args.train, args.valid) == ("hol-light", 60, 40)


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_backend_without_a_proving_loop_is_refused(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        _script(name).parse_args(["--backend", "leandojo"])
    assert exit_.value.code == 2
    assert "invalid choice: 'leandojo'" in capsys.readouterr().err
