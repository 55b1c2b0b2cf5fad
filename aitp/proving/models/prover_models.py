"""The prover's learned models as one checkpoint directory: tactic ranker, premise ranker, policy settings.

Layout of a checkpoint directory (assembled in a hidden sibling and renamed into place):
- `prover_models.json`: format, backend, the ranker's and the policy's settings, training record;
- `tactic_ranker.npy`: the tactic ranker's hashed weights;
- `premise_ranker.pt`: the premise ranker's learned towers (its TF-IDF part comes from the library);
- `goal_critic.npy`: the goal critic's hashed weights, when one was trained (its shape in the manifest's `critic`);
- `training.json`: data counts, losses, seconds (descriptive: not part of the version);
- `generator/` (only when the policy is generative): the generative tactic model's policy checkpoint
  (`aitp.proving.models.tactic_generator`); its tactics replace the ranked fixed set in every search.
Its version is the content fingerprint of the directory, as for every other aitp checkpoint, so the
same weights and settings get the same version however and wherever they were trained. The file names,
and the check the registry runs before it trusts a checkpoint, live in `aitp.checkpoints`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aitp.atomic import publishing_dir
from aitp.checkpoints import (
    CRITIC_FILE,
    GENERATOR_DIR,
    PREMISE_FILE,
    PROVER_FORMAT,
    PROVER_MANIFEST,
    RANKER_FILE,
    read_record,
    write_record,
)
from aitp.errors import CheckpointError
from aitp.fingerprint import fingerprint
from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.models.candidates import CandidateGenerator
from aitp.proving.models.goal_critic import CriticConfig, GoalCritic
from aitp.proving.models.premises import PremiseScorer
from aitp.proving.models.ranked_policy import Exploration, RankedTacticPolicy
from aitp.proving.models.tactic_ranker import RankerConfig, TacticRanker
from aitp.proving.search.base import TacticPolicy

UNTRAINED = "untrained"


@dataclass(frozen=True)
class PolicySettings:
    """How the models become a tactic policy (fixed at evaluation; see `Exploration` for search on train)."""

    family_cap: int = 1  # candidates kept per family (one `destruct` per goal, not per variable)
    temperature: float = 1.0  # softmax temperature of the ranker
    mix: float = 0.1  # share of the default order mixed into every candidate's probability
    top_premises: int = 3  # library premises offered to premise-taking templates
    premise_dim: int = 32
    premise_buckets: int = 1 << 14


@dataclass
class ProverModels:
    """A tactic ranker and a premise ranker for one backend, and the settings that turn them into a policy."""

    backend: str
    ranker: TacticRanker
    premise_scorer: PremiseScorer
    settings: PolicySettings = field(default_factory=PolicySettings)
    version: str = UNTRAINED
    record: dict[str, Any] = field(default_factory=dict)
    critic: GoalCritic | None = None  # None: untrained, the search keeps its own default critic
    generator: Path | None = None  # a generative tactic model's checkpoint: the policy, instead of the ranker

    @classmethod
    def untrained(cls, backend: str, library: TheoremSet, settings: PolicySettings | None = None) -> ProverModels:
        """The default order and TF-IDF premises: what the loop starts from."""
        settings = settings or PolicySettings()
        return cls(backend, TacticRanker(), new_premise_scorer(library, settings), settings)

    def policy(self, library: TheoremSet, explore: Exploration | None = None, automation: bool = False) -> TacticPolicy:
        """A tactic policy usable by any search; `explore` only for train-split search.

        `automation` adds CoqHammer's tactics to the ranked candidates (the session must load CoqHammer).

        With a generative model, evaluation (no `explore`) uses its tactics alone; train-split search interleaves
        them with the ranked set's exploration (`InterleavedPolicy`), so proofs are found from the untrained start.
        """
        s = self.settings
        generator = CandidateGenerator(
            self.backend, library, self.premise_scorer, top_premises=s.top_premises, automation=automation
        )
        ranked = RankedTacticPolicy(generator, self.ranker, s.family_cap, s.temperature, s.mix, explore)
        if self.generator is None:
            return ranked
        from aitp.proving.models.generative import InterleavedPolicy
        from aitp.proving.models.tactic_generator import load_tactic_generator

        generative = load_tactic_generator(self.generator, self.backend, automation=automation)
        return generative if explore is None else InterleavedPolicy(generative, ranked)

    def save(self, path: str | Path) -> str:
        """Write the checkpoint directory atomically; returns its version (content fingerprint)."""
        path = Path(path)
        manifest = {
            "format": PROVER_FORMAT,
            "backend": self.backend,
            "ranker": asdict(self.ranker.config),
            "settings": asdict(self.settings),
        }
        if self.critic is not None:  # absent otherwise, so checkpoints without a critic keep their versions
            manifest["critic"] = asdict(self.critic.config)
        with publishing_dir(path, "prover") as staging:
            (staging / PROVER_MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
            np.save(staging / RANKER_FILE, self.ranker.weights)
            if self.critic is not None:
                np.save(staging / CRITIC_FILE, self.critic.weights)
            self.premise_scorer.save(staging / PREMISE_FILE)
            write_record(staging, self.record)
            if self.generator is not None:
                shutil.copytree(self.generator, staging / GENERATOR_DIR)
        self.generator = path / GENERATOR_DIR if self.generator is not None else None
        self.version = fingerprint(path)
        return self.version


def new_premise_scorer(library: TheoremSet, settings: PolicySettings) -> PremiseScorer:
    """An untrained premise ranker (TF-IDF over the library statements) of the settings' shape."""
    statements = {t.name: t.statement for t in library.theorems}
    return PremiseScorer(statements, dim=settings.premise_dim, buckets=settings.premise_buckets)


def load_prover_models(path: str | Path, library: TheoremSet) -> ProverModels:
    """Load and validate a checkpoint written by `ProverModels.save` (or by a user's training command)."""
    path = Path(path)
    manifest_file = path / PROVER_MANIFEST
    if not manifest_file.is_file():
        raise CheckpointError(
            f"{path} is not a prover checkpoint (no {PROVER_MANIFEST}): write it with ProverModels.save"
        )
    try:
        manifest = json.loads(manifest_file.read_text())
        if manifest.get("format") != PROVER_FORMAT:
            raise ValueError(f"format is {manifest.get('format')!r}, not {PROVER_FORMAT!r}")
        config = RankerConfig(**manifest["ranker"])
        settings = PolicySettings(**manifest["settings"])
        weights = np.load(path / RANKER_FILE, allow_pickle=False)
        ranker = TacticRanker(config, weights)
        scorer = new_premise_scorer(library, settings).load(path / PREMISE_FILE)
        critic = None
        if "critic" in manifest:
            critic = GoalCritic(CriticConfig(**manifest["critic"]), np.load(path / CRITIC_FILE, allow_pickle=False))
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise CheckpointError(f"prover checkpoint {path} is unreadable ({exc}): write it again") from exc
    if manifest.get("backend") != library.backend:
        raise CheckpointError(
            f"prover checkpoint {path} is for {manifest.get('backend')}, not {library.backend}: "
            "train it on this backend"
        )
    record = read_record(path)
    generator = path / GENERATOR_DIR if (path / GENERATOR_DIR).is_dir() else None
    return ProverModels(library.backend, ranker, scorer, settings, fingerprint(path), record, critic, generator)
