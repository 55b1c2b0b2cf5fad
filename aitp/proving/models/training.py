"""Train the prover's models on data selected from the lake: the premise ranker, the tactic ranker, the critic.

The premise ranker is refit first, because the tactic ranker's candidates (which premises a
`rewrite` or `apply` is offered) come from it. Each tactic example becomes a ranking example: the
goal's candidates as the search would see them, the proof's tactic as the target (added when it
is no longer among them), the tactics that errored on that goal added as negatives, and the
tactics that also worked masked out. Models are fitted from scratch on all data so far, so the
result depends only on the data and the seed.
"""

from __future__ import annotations

import time

import torch

from aitp.proving.data.theorem_set import TheoremSet
from aitp.proving.data.training_data import TacticExample, TrainingData
from aitp.proving.env import Goal
from aitp.proving.models.candidates import CandidateGenerator
from aitp.proving.models.goal_critic import CriticConfig, GoalCritic, fit_critic
from aitp.proving.models.prover_models import PolicySettings, ProverModels, new_premise_scorer
from aitp.proving.models.tactic_ranker import RankerConfig, RankingExample, TacticRanker, fit_ranker
from aitp.train.data import NoTrainingDataError


def ranking_examples(examples: list[TacticExample], generator: CandidateGenerator) -> list[RankingExample]:
    """Ranking examples for the tactic ranker, one per goal of a re-checked proof."""
    out = []
    for ex in examples:
        goal = Goal(ex.goal, ex.theorem)
        cands = generator.candidates(goal)
        index = {c.tactic: i for i, c in enumerate(cands)}
        for tactic in (ex.tactic, *ex.erroring):
            if tactic not in index:
                extra = generator.candidate_for(goal, tactic)
                if extra is not None:
                    index[tactic] = len(cands)
                    cands.append(extra)
        if ex.tactic not in index:
            continue  # a tactic outside the templates (e.g. from a generative policy): nothing to rank
        masked = frozenset(index[t] for t in ex.alternatives if t in index)
        negatives = frozenset(index[t] for t in ex.erroring if t in index)
        out.append(RankingExample(ex.goal, cands, index[ex.tactic], masked, negatives))
    return out


def train_prover_models(
    data: TrainingData,
    library: TheoremSet,
    settings: PolicySettings | None = None,
    ranker_config: RankerConfig | None = None,
    epochs: int = 8,
    premise_epochs: int = 5,
    seed: int = 0,
    learn: bool = True,
) -> ProverModels:
    """Fit a premise ranker and a tactic ranker on `data`; `learn=False` returns the untrained models (control).

    Raises `NoTrainingDataError` when learning and `data` holds no tactic example (no re-checked train proof yet).
    """
    if learn and not data.tactics:
        raise NoTrainingDataError(
            "no re-checked proof of a train theorem in the lake yet: search more of the train split or widen its budget"
        )
    settings = settings or PolicySettings()
    start = time.perf_counter()
    torch.manual_seed(seed)
    scorer = new_premise_scorer(library, settings)
    ranker = TacticRanker(ranker_config)
    record: dict = {"data": data.counts(), "seed": seed, "learn": learn}
    if learn:
        premise_pairs = [(p.goal, list(p.premises)) for p in data.premises]
        record["premise_loss"] = scorer.fit(premise_pairs, epochs=premise_epochs) if premise_pairs else None
        generator = CandidateGenerator(library.backend, library, scorer, top_premises=settings.top_premises)
        examples = ranking_examples(data.tactics, generator)
        record["ranking_examples"] = len(examples)
        record["ranker_losses"] = fit_ranker(ranker, examples, epochs=epochs, seed=seed)
    critic = None
    if learn and data.critic:  # labels are selected only when a learned critic was asked for
        critic = GoalCritic(CriticConfig())
        labels = [float(e.label) for e in data.critic]
        record["critic_positive_rate"] = round(sum(labels) / len(labels), 4)
        record["critic_losses"] = fit_critic(critic, [e.goal for e in data.critic], labels, seed=seed)
    record["train_seconds"] = round(time.perf_counter() - start, 3)
    return ProverModels(library.backend, ranker, scorer, settings, record=record, critic=critic)
