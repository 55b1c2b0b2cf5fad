"""The prover models checkpoint with a goal critic: it round-trips, and its version follows the critic's weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aitp.checkpoints import CRITIC_FILE, PROVER_MANIFEST, verify_prover_checkpoint
from aitp.errors import CheckpointError
from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.env import Goal, Theorem
from aitp.proving.models.goal_critic import GoalCritic, fit_critic
from aitp.proving.models.prover_models import ProverModels, load_prover_models

GOALS = ["b : bool\n⊢ b && true = b", "l : list nat\n⊢ rev (rev l) = l", "⊢ true = true", "n : nat\n⊢ n * 0 = 0"]


def _library() -> TheoremSet:
    theorems = [Theorem("Coq.Bool.Bool.andb_true_r", "forall b : bool, b && true = b", "coq", module="Coq.Bool.Bool")]
    return TheoremSet("mini", "coq", theorems, [t.name for t in theorems])


def _trained(library: TheoremSet, seed: int = 0) -> ProverModels:
    models = ProverModels.untrained("coq", library)
    models.critic = GoalCritic()
    fit_critic(models.critic, GOALS, [1.0, 0.0, 1.0, 0.0], epochs=3, seed=seed)
    return models


def test_the_critic_round_trips_and_its_weights_make_the_version(tmp_path):
    library = _library()
    models = _trained(library)
    version = models.save(tmp_path / "a")
    assert verify_prover_checkpoint(tmp_path / "a") == "prover"
    loaded = load_prover_models(tmp_path / "a", library)
    assert loaded.version == version and loaded.critic is not None
    goals = [Goal(g, "x") for g in GOALS]
    assert loaded.critic(goals) == models.critic(goals) and len(set(loaded.critic(goals))) > 1
    assert _trained(library).save(tmp_path / "b") == version  # same weights, same version
    other = _trained(library)
    other.critic.weights = other.critic.weights * 2
    assert other.save(tmp_path / "c") != version
    # without a critic: no critic file, no manifest key, and the version of the untrained models as before
    untrained = ProverModels.untrained("coq", library)
    untrained.save(tmp_path / "d")
    assert not (tmp_path / "d" / CRITIC_FILE).exists() and "critic" not in json.loads(
        (tmp_path / "d" / PROVER_MANIFEST).read_text()
    )
    assert load_prover_models(tmp_path / "d", library).critic is None


def test_a_checkpoint_that_lost_its_critic_is_refused(tmp_path):
    library = _library()
    _trained(library).save(tmp_path / "a")
    (tmp_path / "a" / CRITIC_FILE).unlink()
    with pytest.raises(CheckpointError, match=CRITIC_FILE):
        verify_prover_checkpoint(tmp_path / "a")
    with pytest.raises(CheckpointError, match="unreadable"):
        load_prover_models(tmp_path / "a", library)
    np.save(tmp_path / "a" / CRITIC_FILE, np.zeros(7, np.float32))  # the wrong shape
    with pytest.raises(CheckpointError, match="unreadable"):
        load_prover_models(tmp_path / "a", library)
