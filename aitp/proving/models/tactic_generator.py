"""The generative tactic model: a language model fine-tuned on the tactics of re-checked proofs.

Its examples are the tactic examples of `aitp.proving.data.training_data` (train split only, proofs the
prover re-checked): the goal rendered by `goal_prompt` as the prompt, the proof's tactic as the
completion (and, optionally, the other tactics that also worked on that goal); the preference pairs
(the proving tactic over one that errored on the same goal) feed DPO. Training goes through the
project's training machinery (`aitp.train.run.fit`), so the same call fine-tunes the built-in byte-level
transformer on a CPU or a Hugging Face checkpoint under DeepSpeed on a GPU: the base is any policy spec.
How prompts were rendered is kept in the checkpoint's training record, so search prompts match training.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from aitp.checkpoints import read_record, write_record
from aitp.policies.spec import PolicySpec
from aitp.proving.data.trace_queries import train_only
from aitp.proving.data.training_data import PreferencePair, TacticExample, TrainingData
from aitp.proving.env import Goal
from aitp.proving.models.generative import GenerativeTacticPolicy, goal_prompt
from aitp.train.config import TrainConfig
from aitp.train.data import NoTrainingDataError

RECORD_KEY = "tactic_generator"  # where the prompt settings live in the checkpoint's training record
TINY_TACTIC_MODEL = {"n_layer": 4, "n_head": 4, "n_kv_head": 1, "d_model": 128, "max_seq_len": 384}
"""A fresh built-in model for tactics (~0.8M parameters): goals are cut to fit its context."""


@dataclass(frozen=True)
class GeneratorSettings:
    """How goals become prompts and how tactics are sampled from the model."""

    max_goal_chars: int | None = 256
    """The goal's last characters in the prompt (None: all of it, for a model with a long context)."""
    temperature: float = 1.0
    """Sampling temperature in search (the samples are ranked by log-prob, so 1 is both explore and exploit)."""
    samples_per_tactic: int = 2
    """Completions drawn per tactic a search asks for; the best distinct valid ones are kept."""
    max_tokens: int = 32
    """Longest tactic in tokens."""
    with_alternatives: bool = True
    """Also train on the other tactics that worked on a proof's goal (they are right too)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GeneratorSettings:
        """From a training record (keys it does not know are ignored: they came from a newer writer)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def fresh_tiny_generator(seed: int = 0, sizes: dict[str, Any] | None = None) -> PolicySpec:
    """A randomly initialised built-in model of the tactic size: the untrained generative model."""
    return PolicySpec(backend="tiny", config=dict(sizes or TINY_TACTIC_MODEL), seed=seed)


def _prompt(goal: str, theorem: str, backend: str, settings: GeneratorSettings) -> str:
    return json.dumps(goal_prompt(Goal(goal, theorem), backend, settings.max_goal_chars))


def sft_examples(examples: list[TacticExample], backend: str, settings: GeneratorSettings) -> list[dict[str, Any]]:
    """One (goal prompt, tactic) example per proof step, plus the step's alternatives if asked; each once."""
    out, seen = [], set()
    for ex in examples:
        tactics = (ex.tactic, *ex.alternatives) if settings.with_alternatives else (ex.tactic,)
        for number, tactic in enumerate(tactics):
            key = (ex.goal, tactic)
            if key in seen:
                continue
            seen.add(key)
            out.append(
                {
                    "source": ex.source if number == 0 else "alternative",
                    "theorem": train_only(ex.theorem),
                    "iteration": ex.iteration,
                    "search_id": ex.search_id,
                    "node_id": ex.node_id,
                    "prompt": _prompt(ex.goal, ex.theorem, backend, settings),
                    "completion": tactic,
                }
            )
    return out


def dpo_examples(pairs: list[PreferencePair], backend: str, settings: GeneratorSettings) -> list[dict[str, Any]]:
    """One (goal prompt, proving tactic, erroring tactic) example per preference pair."""
    return [
        {
            "source": "pair",
            "theorem": train_only(p.theorem),
            "prompt": _prompt(p.goal, p.theorem, backend, settings),
            "completion": p.chosen,
            "rejected": p.rejected,
        }
        for p in pairs
    ]


def train_tactic_generator(
    data: TrainingData,
    backend: str,
    base: PolicySpec | str | Path,
    config: TrainConfig,
    out: str | Path,
    settings: GeneratorSettings | None = None,
) -> Path:
    """Fine-tune `base` on the re-checked proofs' tactics (sft) or preference pairs (dpo); the checkpoint's path.

    Raises `NoTrainingDataError` when the data has no example for the objective.
    """
    from aitp.train.run import fit

    settings = settings or GeneratorSettings()
    if config.objective == "sft":
        examples = sft_examples(data.tactics, backend, settings)
    else:
        examples = dpo_examples(data.pairs, backend, settings)
    if not examples:
        kind = "tactic examples" if config.objective == "sft" else "preference pairs"
        raise NoTrainingDataError(
            f"no {kind} from re-checked train proofs for the tactic generator: search more of the train split"
        )
    meta = {RECORD_KEY: asdict(settings) | {"backend": backend}, "data": data.counts()}
    fit(examples, PolicySpec.parse(base), config, out, meta)
    return Path(out)


def generator_settings(spec: PolicySpec | str | Path) -> GeneratorSettings:
    """The prompt settings a checkpoint was trained with (defaults for a fresh model or a foreign checkpoint)."""
    path = PolicySpec.parse(spec).local_path()
    recorded = read_record(path).get("meta", {}).get(RECORD_KEY) if path is not None and path.is_dir() else None
    return GeneratorSettings.from_dict(recorded) if recorded else GeneratorSettings()


def load_tactic_generator(
    spec: PolicySpec | str | Path,
    backend: str,
    settings: GeneratorSettings | None = None,
    device: str | None = None,
    automation: bool = False,
) -> GenerativeTacticPolicy:
    """A tactic policy for any search from a generator checkpoint (or a fresh model's spec); `automation`: its
    searches' sessions load CoqHammer, so the model may answer with CoqHammer's tactics."""
    from aitp.policies.loading import load_policy

    settings = settings or generator_settings(spec)
    return GenerativeTacticPolicy(
        load_policy(PolicySpec.parse(spec), device=device),
        backend,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        max_goal_chars=settings.max_goal_chars,
        samples_per_tactic=settings.samples_per_tactic,
        automation=automation,
    )


def prepare_generator(
    data: TrainingData | None,
    backend: str,
    base: PolicySpec | str | Path | None,
    config: TrainConfig,
    settings: GeneratorSettings,
    out: Path,
) -> Path:
    """The generator checkpoint a prover checkpoint at `out` will hold, staged beside it (the caller removes it).

    With `data`, `base` (None: a fresh built-in model) fine-tuned on it; without (an untrained start or the
    control), the base itself, so the untrained generative model is evaluated and gated like a trained one.
    """
    import shutil

    from aitp.atomic import staging_dir

    staged = staging_dir(out, "generator")
    spec = fresh_tiny_generator(config.seed) if base is None else PolicySpec.parse(base)
    if data is not None:
        return train_tactic_generator(data, backend, spec, config, staged, settings)
    path = spec.local_path()
    if path is not None and path.is_dir():
        shutil.copytree(path, staged)
    elif path is not None:  # a one-file model (a GGUF): saved as a directory, as a fine-tuned generator is
        from aitp.policies.loading import load_policy

        policy = load_policy(spec, device="cpu")
        policy.model.save_pretrained(staged)
        policy.tokenizer.save_pretrained(staged)
    else:
        from aitp.policies.loading import load_policy
        from aitp.policies.tiny import save_checkpoint

        save_checkpoint(staged, load_policy(spec, device="cpu").model, meta={"untrained": True})
    record = read_record(staged)  # the prompt settings must reach search for an untrained model too
    record.setdefault("meta", {})[RECORD_KEY] = asdict(settings) | {"backend": backend}
    write_record(staged, record)
    return staged
