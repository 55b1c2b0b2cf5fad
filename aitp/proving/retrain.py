"""Retrain the prover's models from a lake, as a command: what `train_after_eval` can run out of the box.

    python -m aitp.proving.retrain --home {home} --experiment {experiment} --iteration {iteration} --out {out}

Selects the training data up to the iteration with SQL, fits the premise ranker and the tactic
ranker, and writes the checkpoint directory to `--out`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aitp.proving.data.theorems import load_theorem_set
from aitp.proving.data.training_data import select_training_data
from aitp.proving.models.training import train_prover_models


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, select, train, save; print the checkpoint's version and data counts."""
    ap = argparse.ArgumentParser(prog="python -m aitp.proving.retrain", description=__doc__.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="aitp home holding the lake")
    ap.add_argument("--experiment", required=True)
    ap.add_argument("--iteration", type=int, required=True, help="use proofs up to this iteration")
    ap.add_argument("--out", type=Path, required=True, help="checkpoint directory to write")
    ap.add_argument("--theorems", default="coq-stdlib", help="theorem set (name or JSONL path)")
    ap.add_argument("--theorem-home", type=Path, default=None, help="where the set is cached (default: --home)")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    library = load_theorem_set(args.theorems, args.theorem_home or args.home)
    data = select_training_data(args.home, args.experiment, args.iteration, library)
    models = train_prover_models(data, library, epochs=args.epochs, seed=args.seed)
    version = models.save(args.out)
    print(json.dumps({"version": version, "data": data.counts()}))


if __name__ == "__main__":
    main()
