"""A registered prover model, named `HOME:EXPERIMENT[:ALIAS|:VERSION]`, and the proving settings it was evaluated with.

`aitp prove --model` and `benchmarks/prove_peers.py --model` search with a model the loop trained; both must search as
the loop's evaluation did (its search, budgets, tactic timeout, CoqHammer and closing tactics), so the settings come
from the experiment's recorded config, never from a guess. This lives with the loop, whose records it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aitp.errors import BadInputError
from aitp.proving.config import ProvingConfig


@dataclass(frozen=True)
class RegisteredProver:
    """What a search needs of a registered model: a name for tables, its checkpoint, its experiment's settings."""

    label: str
    checkpoint: str
    proving: ProvingConfig


def registered_prover(spec: str) -> RegisteredProver:
    """The model `HOME:EXPERIMENT[:ALIAS|:VERSION]` names (default alias: champion), refused in one line where it
    cannot be searched with here."""
    from aitp.loop.experiment import resume_config
    from aitp.registry.promotion import require_version
    from aitp.registry.store import Registry

    parts = spec.split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise BadInputError(f"--model {spec!r}: write HOME:EXPERIMENT[:ALIAS|:VERSION], e.g. runs/prove:prove-coq")
    home, experiment, *alias = parts
    if not Path(home).is_dir():
        raise BadInputError(f"--model {spec!r}: no aitp home at {home}: pass the --home the loop ran with")
    ref = alias[0] if alias else "champion"
    mv = require_version(Registry(home), experiment, ref)
    if not mv.checkpoint or not Path(mv.checkpoint).is_dir():
        raise BadInputError(
            f"--model {spec!r} has no local checkpoint ({mv.checkpoint!r}): run on the machine that trained it"
        )
    world = resume_config(Path(home), experiment).environment
    if world.type != "proving":
        raise BadInputError(f"--model {spec!r}: experiment {experiment} is not a proving loop: name a proving one")
    return RegisteredProver(f"{experiment}:{ref}", mv.checkpoint, world)
