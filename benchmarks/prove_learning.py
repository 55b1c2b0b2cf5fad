"""Does proving learn? Expert iteration on Coq with the goal-conditioned tactic ranker, against a control.

    PYTHONPATH=. python benchmarks/prove_learning.py --iterations 4            # learning
    PYTHONPATH=. python benchmarks/prove_learning.py --iterations 4 --control  # learning off

Each iteration: search a slice of the train split with the champion's models and exploration
(sampled candidate order, a wider cut), commit the traces to a lake under a temporary home, select
training data from the lake with SQL (shortest re-checked proof per train theorem so far), train
the tactic ranker and premise ranker from scratch on it, evaluate the challenger on fixed valid
theorems at a fixed budget (greedy, no exploration), and promote it when it proves strictly more
of them. The last champion is compared with the first (the untrained models) by a paired
bootstrap over theorems. `--control` trains nothing: the challenger is the untrained models.
One prover session; evaluations of a model version already evaluated are reused (deterministic).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from aitp.paired import wilson
from aitp.proving.backends import open_env
from aitp.proving.data.theorems import load_theorem_set
from aitp.proving.data.training_data import select_training_data
from aitp.proving.learning import commit_traces, decide_promotion, paired_proof_gain, search_theorems, train_slice
from aitp.proving.models.prover_models import PolicySettings, ProverModels
from aitp.proving.models.ranked_policy import Exploration
from aitp.proving.models.tactic_ranker import RankerConfig
from aitp.proving.models.training import train_prover_models
from aitp.proving.search import Budget, SearchConfig, make_search


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--train-slice", type=int, default=100, help="train theorems searched per iteration")
    ap.add_argument("--valid", type=int, default=100, help="valid theorems evaluated (fixed, in library order)")
    ap.add_argument("--expansions", type=int, default=8, help="expansions per theorem (train and valid)")
    ap.add_argument("--eval-tactics", type=int, default=6, help="tactics per goal at evaluation")
    ap.add_argument("--train-tactics", type=int, default=10, help="tactics per goal on the train slice")
    ap.add_argument("--explore", type=float, default=1.0, help="Gumbel temperature on the train slice (0: greedy)")
    ap.add_argument("--bound", type=float, default=3.0, help="most nats the learned ranker term may move a tactic")
    ap.add_argument("--mix", type=float, default=0.1, help="share of the default order in every probability")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--control", action="store_true", help="learning off: the challenger is always untrained")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--home", type=Path, default=None, help="aitp home (default: a temporary one)")
    ap.add_argument("--theorem-home", type=Path, default=None, help="where the extracted theorem set is cached")
    ap.add_argument("--json", type=Path, default=None, help="write the per-iteration table here")
    args = ap.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="aitp-prove-learning-"))
    library = load_theorem_set("coq-stdlib", args.theorem_home or home)
    valid = library.split("valid")[: args.valid]
    settings = PolicySettings(mix=args.mix)
    ranker_config = RankerConfig(bound=args.bound)
    experiment = "control" if args.control else "learn"

    def config(tactics: int) -> SearchConfig:
        return SearchConfig(budget=Budget(args.expansions, 60.0, 120.0), tactics_per_goal=tactics, tactic_timeout=2.0)

    evals: dict[str, dict[str, bool]] = {}
    rows = []
    start = time.perf_counter()
    with open_env("coq", tactic_timeout=2.0) as env:
        env.set_premises(library.premise_map())

        def evaluate(models: ProverModels, iteration: int) -> tuple[dict[str, bool], dict]:
            if models.version in evals:
                return evals[models.version], {}
            out = search_theorems(
                env,
                valid,
                make_search("bestfs", config(args.eval_tactics)),
                models.policy(library),
                experiment,
                iteration,
                models.version,
            )
            commit_traces(home, experiment, iteration, out, "valid")
            evals[models.version] = out.proved
            return out.proved, out.summary()

        champion = ProverModels.untrained("coq", library, settings)
        champion.save(home / "checkpoints" / experiment / "iter-000")
        first_eval, summary = evaluate(champion, 0)
        champion_eval = first_eval
        k = sum(first_eval.values())
        rows.append(
            {
                "iteration": 0,
                "valid_proved": k,
                "valid_n": len(valid),
                "ci95": wilson(k, len(valid)),
                "promoted": True,
                "champion": champion.version,
                "valid_expansions_per_proof": summary.get("expansions_per_proof"),
                "wall_s": round(time.perf_counter() - start, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        for iteration in range(1, args.iterations + 1):
            t0 = time.perf_counter()
            theorems = train_slice(library, iteration - 1, args.train_slice, args.seed)
            explore = Exploration(args.explore, seed=args.seed * 1000 + iteration) if args.explore > 0 else None
            searched = search_theorems(
                env,
                theorems,
                make_search("bestfs", config(args.train_tactics)),
                champion.policy(library, explore),
                experiment,
                iteration,
                champion.version,
            )
            commit_traces(home, experiment, iteration, searched, "train")
            t1 = time.perf_counter()
            data = select_training_data(home, experiment, iteration, library)
            challenger = train_prover_models(
                data, library, settings, ranker_config, epochs=args.epochs, seed=args.seed, learn=not args.control
            )
            challenger.save(home / "checkpoints" / experiment / f"iter-{iteration:03d}")
            t2 = time.perf_counter()
            challenger_eval, summary = evaluate(challenger, iteration)
            decision = decide_promotion(champion_eval, challenger_eval)
            old_proved = {t for t, ok in champion_eval.items() if ok}
            new_proved = {t for t, ok in challenger_eval.items() if ok}
            if decision.promote:
                champion, champion_eval = challenger, challenger_eval
            k = sum(challenger_eval.values())
            s = searched.summary()
            rows.append(
                {
                    "iteration": iteration,
                    "train_searched": s["theorems"],
                    "train_proved": s["proved"],
                    "train_proved_to_date": data.counts()["proofs"],
                    "tactic_examples": data.counts()["tactic_examples"],
                    "valid_proved": k,
                    "valid_n": len(valid),
                    "ci95": wilson(k, len(valid)),
                    "valid_new": len(new_proved - old_proved),
                    "valid_retained": len(new_proved & old_proved),
                    "valid_lost": len(old_proved - new_proved),
                    "valid_expansions_per_proof": summary.get("expansions_per_proof"),
                    "promoted": decision.promote,
                    "gain_vs_champion": str(decision.gain),
                    "champion": champion.version,
                    "search_s": round(t1 - t0, 1),
                    "train_s": round(t2 - t1, 1),
                    "eval_s": round(time.perf_counter() - t2, 1),
                    "wall_s": round(time.perf_counter() - start, 1),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    final = paired_proof_gain(first_eval, champion_eval, ("first champion", "last champion"))
    promotions = sum(r["promoted"] for r in rows[1:])
    result = {
        "experiment": experiment,
        "args": vars(args) | {"home": str(home)},
        "rows": rows,
        "promotions": promotions,
        "last_vs_first": final.to_dict(),
        "wall_s": round(time.perf_counter() - start, 1),
    }
    print(json.dumps({"promotions": promotions, "last_vs_first": str(final), "wall_s": result["wall_s"]}))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
