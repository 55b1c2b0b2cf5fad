"""The proving settings benchmarks read per backend come from that backend's shipped loop config."""

from __future__ import annotations

import pytest

from aitp.configs import SHIPPED_CONFIGS, load_config
from aitp.loop.config import LoopConfig
from aitp.proving.backends import BACKENDS
from aitp.proving.config import PROVER_BACKENDS, ProvingConfig, loop_proving
from aitp.proving.data.theorems import THEOREM_SETS
from aitp.proving.errors import UnknownBackendError


@pytest.mark.parametrize("backend", PROVER_BACKENDS)
def test_each_backend_reads_its_own_loop_config(backend):
    proving = loop_proving(backend)
    assert proving.backend == backend  # not another backend's file
    assert THEOREM_SETS[proving.theorem_set_name] == backend
    shipped = load_config(LoopConfig, SHIPPED_CONFIGS / BACKENDS[backend].loop_config).environment
    assert proving == shipped


def test_the_loop_runs_on_the_backends_that_ship_a_loop_config():
    assert PROVER_BACKENDS == tuple(b.name for b in BACKENDS.values() if b.loop_config)


def test_hol_light_keeps_its_cpu_time_budget_not_coqs():
    # prove-hol.yaml budgets HOL Light's session CPU seconds below Coq's wall-clock timeout
    assert loop_proving("hol-light").tactic_timeout < loop_proving("coq").tactic_timeout


def test_an_unknown_backend_is_refused_with_the_known_ones():
    with pytest.raises(UnknownBackendError, match="use one of coq, hol-light"):
        loop_proving("lean")
    with pytest.raises(UnknownBackendError, match="use one of coq, hol-light"):
        loop_proving("leandojo")  # registered, but it ships no proving loop


def test_theorem_set_name_is_the_named_set_else_the_backends_default(tmp_path):
    assert (
        ProvingConfig(backend="hol-light").theorem_set_name == BACKENDS["hol-light"].default_theorem_set == "hol-core"
    )
    assert ProvingConfig(backend="coq").theorem_set_name == "coq-stdlib"
    path = str(tmp_path / "mine.jsonl")
    (tmp_path / "mine.jsonl").write_text("")  # a path is checked to exist when the config is read
    assert ProvingConfig(backend="coq", theorems=path).theorem_set_name == path
