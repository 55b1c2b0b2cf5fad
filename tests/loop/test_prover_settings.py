"""The proving settings benchmarks read per backend come from that backend's shipped loop config."""

from __future__ import annotations

import pytest

from aitp.configs import SHIPPED_CONFIGS, load_config
from aitp.loop.config import PROVER_BACKENDS, LoopConfig, ProvingConfig
from aitp.loop.prover_settings import LOOP_CONFIGS, loop_proving
from aitp.proving.backends import DEFAULT_THEOREM_SETS
from aitp.proving.errors import UnknownBackendError
from aitp.proving.theorems import THEOREM_SETS


@pytest.mark.parametrize("backend", PROVER_BACKENDS)
def test_each_backend_reads_its_own_loop_config(backend):
    proving = loop_proving(backend)
    assert proving.backend == backend  # not another backend's file
    assert THEOREM_SETS[proving.theorem_set_name] == backend
    shipped = load_config(LoopConfig, SHIPPED_CONFIGS / LOOP_CONFIGS[backend]).proving
    assert (proving.tactic_timeout, proving.prover_seconds) == (shipped.tactic_timeout, shipped.prover_seconds)


def test_hol_light_keeps_its_cpu_time_budget_not_coqs():
    # prove-hol.yaml budgets HOL Light's session CPU seconds below Coq's wall-clock timeout
    assert loop_proving("hol-light").tactic_timeout < loop_proving("coq").tactic_timeout


def test_an_unknown_backend_is_refused_with_the_known_ones():
    with pytest.raises(UnknownBackendError, match="use one of coq, hol-light"):
        loop_proving("lean")


def test_theorem_set_name_is_the_named_set_else_the_backends_default(tmp_path):
    assert ProvingConfig(backend="hol-light").theorem_set_name == DEFAULT_THEOREM_SETS["hol-light"] == "hol-core"
    assert ProvingConfig(backend="coq").theorem_set_name == "coq-stdlib"
    path = str(tmp_path / "mine.jsonl")
    (tmp_path / "mine.jsonl").write_text("")  # a path is checked to exist when the config is read
    assert ProvingConfig(backend="coq", theorems=path).theorem_set_name == path
