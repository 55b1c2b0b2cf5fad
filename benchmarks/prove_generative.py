"""The fixed-tactic prior against the generative tactic model, trained and untrained, at equal budget.

    PYTHONPATH=. python benchmarks/prove_generative.py --train 400 --valid 100 --json gen.json
    PYTHONPATH=. python benchmarks/prove_generative.py --backend hol-light --train 80 --valid 40

`--backend` (coq, hol-light) takes the theorem set, tactic timeout and prover seconds of that backend's proving
loop (`configs/prove-coq.yaml`, `configs/prove-hol.yaml`), its fixed tactic set and its tactic grammar.

One run: search `--train` theorems of the train split with the untrained prover models, exploring
(what the loop's first iteration does), commit the traces to a lake under a temporary home, select
the training data with SQL (re-checked train proofs only), then train from the same data
- the tactic ranker (the ranked policy over the fixed tactic set, `aitp.proving.models.training`);
- the generative model: the built-in byte-level transformer from random initialisation, SFT on
  (goal, tactic) examples, then optionally DPO on the preference pairs (`aitp.proving.models.tactic_generator`);
and evaluate each on the first `--valid` valid theorems (library order) at one budget (BestFS,
`--expansions` expansions, `--tactics` tactics per goal): the fixed-tactic prior (default order),
the trained ranker, the untrained generative model (same architecture, random weights) and the
trained one(s). Each challenger is gated as the loop gates it: promoted over its untrained self
only if it proves strictly more of the same theorems.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from aitp.paired import wilson
from aitp.proving.backends import open_env
from aitp.proving.config import PROVER_BACKENDS, loop_proving
from aitp.proving.data.theorems import load_theorem_set
from aitp.proving.data.training_data import select_training_data
from aitp.proving.learning import commit_traces, decide_promotion, search_theorems, train_slice
from aitp.proving.models.prover_models import ProverModels
from aitp.proving.models.ranked_policy import Exploration
from aitp.proving.models.tactic_generator import (
    GeneratorSettings,
    fresh_tiny_generator,
    load_tactic_generator,
    train_tactic_generator,
)
from aitp.proving.models.training import train_prover_models
from aitp.proving.search import Budget, SearchConfig, make_search
from aitp.train.config import TrainConfig


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's sizes and backend, checked before a prover starts."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=PROVER_BACKENDS, default="coq", help="prover; its loop config's settings")
    ap.add_argument("--train", type=int, default=400, help="train theorems searched for training data")
    ap.add_argument("--valid", type=int, default=100, help="valid theorems evaluated (fixed, library order)")
    ap.add_argument("--expansions", type=int, default=8, help="expansions per theorem at evaluation")
    ap.add_argument("--tactics", type=int, default=4, help="tactics per goal at evaluation")
    ap.add_argument("--train-tactics", type=int, default=10, help="tactics per goal on the train search")
    ap.add_argument("--sft-steps", type=int, default=600)
    ap.add_argument("--dpo-steps", type=int, default=0, help="DPO steps after SFT (0: none)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=1, help="training threads (1 is fastest on a loaded machine)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--home", type=Path, default=None, help="aitp home (default: a temporary one)")
    ap.add_argument("--theorem-home", type=Path, default=None, help="where the extracted theorem set is cached")
    ap.add_argument("--json", type=Path, default=None, help="write the table here")
    return ap.parse_args(argv)


def main() -> None:
    args = parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="aitp-prove-generative-"))
    backend, loop = args.backend, loop_proving(args.backend)
    library = load_theorem_set(loop.theorem_set_name, args.theorem_home or home)
    valid = library.split("valid")[: args.valid]
    experiment, settings = "generative", GeneratorSettings()
    budget = Budget(args.expansions, loop.prover_seconds, 120.0)
    timings: dict[str, float] = {}
    start = time.perf_counter()

    with open_env(backend, tactic_timeout=loop.tactic_timeout) as env:
        env.set_premises(library.premise_map())
        untrained = ProverModels.untrained(backend, library)
        train_config = SearchConfig(
            budget=budget, tactics_per_goal=args.train_tactics, tactic_timeout=loop.tactic_timeout
        )
        theorems = train_slice(library, 0, args.train, args.seed)
        explore = untrained.policy(library, Exploration(1.0, seed=args.seed))
        searched = search_theorems(env, theorems, make_search("bestfs", train_config), explore, experiment, 1)
        commit_traces(home, experiment, 1, searched, "train")
        timings["train_search_s"] = time.perf_counter() - start
        data = select_training_data(home, experiment, 1, library)
        print(json.dumps({"train_search": searched.summary(), "data": data.counts()}), flush=True)

        t0 = time.perf_counter()
        ranker = train_prover_models(data, library, seed=args.seed)
        timings["ranker_train_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        base = fresh_tiny_generator(args.seed)
        sft = TrainConfig(
            objective="sft",
            steps=args.sft_steps,
            batch_size=args.batch_size,
            lr=args.lr,
            max_len=384,
            seed=args.seed,
            threads=args.threads,
        )
        sft_dir = train_tactic_generator(data, backend, base, sft, home / "generator-sft", settings)
        record = json.loads((sft_dir / "training.json").read_text())
        timings["generator_sft_s"] = time.perf_counter() - t0
        print(json.dumps({"sft": {k: record[k] for k in ("examples", "steps", "tokens", "seconds")}}), flush=True)
        generators = {"generative, untrained": base, "generative, SFT": sft_dir}
        if args.dpo_steps:
            t0 = time.perf_counter()
            dpo = sft.model_copy(update={"objective": "dpo", "steps": args.dpo_steps, "lr": args.lr / 10})
            generators["generative, SFT + DPO"] = train_tactic_generator(
                data, backend, sft_dir, dpo, home / "generator-dpo", settings
            )
            timings["generator_dpo_s"] = time.perf_counter() - t0

        eval_config = SearchConfig(budget=budget, tactics_per_goal=args.tactics, tactic_timeout=loop.tactic_timeout)
        policies = {"fixed-tactic prior (default order)": untrained.policy(library), "ranked (trained)": None}
        policies["ranked (trained)"] = ranker.policy(library)
        policies |= {name: load_tactic_generator(spec, backend, settings) for name, spec in generators.items()}
        results, rows = {}, []
        for name, policy in policies.items():
            t0 = time.perf_counter()
            out = search_theorems(env, valid, make_search("bestfs", eval_config), policy, experiment, 2)
            seconds = time.perf_counter() - t0
            results[name] = out.proved
            s, k = out.summary(), sum(out.proved.values())
            row = {
                "policy": name,
                "valid_proved": k,
                "valid_n": len(valid),
                "proof_rate": s["proof_rate"],
                "ci95": wilson(k, len(valid)),
                "expansions_per_proof": s["expansions_per_proof"],
                "mean_proof_steps": s["mean_proof_steps"],
                "rejected_samples": getattr(policy, "rejected", None),
                "eval_s": round(seconds, 1),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)

    gates = {}
    for name in generators:
        if name == "generative, untrained":
            continue
        against = {
            "untrained generative": results["generative, untrained"],
            "fixed-tactic prior": results["fixed-tactic prior (default order)"],
            "ranked (trained)": results["ranked (trained)"],
        }
        for label, champion in against.items():
            decision = decide_promotion(champion, results[name])
            only = sorted(t for t, ok in results[name].items() if ok and not champion[t])
            gates[f"{name} vs {label}"] = {"promote": decision.promote, "gain": str(decision.gain), "only_it": only}
    for key, gate in gates.items():
        print(json.dumps({key: gate}), flush=True)
    result = {
        "args": vars(args) | {"home": str(home)},
        "prover": {"theorem_set": library.name, "tactic_timeout": loop.tactic_timeout, "prover_s": loop.prover_seconds},
        "settings": settings.__dict__,
        "train_search": searched.summary(),
        "data": data.counts(),
        "rows": rows,
        "gates": gates,
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "wall_s": round(time.perf_counter() - start, 1),
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({"wall_s": result["wall_s"]}))


if __name__ == "__main__":
    main()
