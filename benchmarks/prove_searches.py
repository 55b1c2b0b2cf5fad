"""The learned goal critic and the searches compared at equal budget, on Coq or HOL Light, from one run.

    PYTHONPATH=. python benchmarks/prove_searches.py --train 300 --valid 200 --json /tmp/searches.json
    PYTHONPATH=. python benchmarks/prove_searches.py --backend hol-light --train 80 --valid 50

`--backend` takes the theorem set, tactic timeout and prover seconds of that backend's proving loop
(`configs/prove-coq.yaml`, `configs/prove-hol.yaml`) and the backend's fixed tactic set.

One run: search train theorems with the untrained models and exploration (as the loop's first iteration does),
commit the traces to a lake, select the training data with SQL (shortest re-checked proofs; critic labels:
goals on re-checked proof paths 1, goals left unproved after `--min-visits` visits 0, train split only), train
the tactic ranker, premise ranker and goal critic, then search the same valid theorems with that one tactic
policy (greedy) at the same budget under every search/critic variant. Reported: the critic's AUC on valid-split
goals (labelled the same way, from the valid searches whose choices no critic steered: BestFS without a critic
and HTPS with the constant one) with a bootstrap interval, beside the untrained length prior's; per variant the
proof rate (Wilson 95 %), expansions per proof and prover seconds; paired differences with bootstrap intervals.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from aitp.paired import wilson
from aitp.proving.backends import open_env
from aitp.proving.config import PROVER_BACKENDS, loop_proving
from aitp.proving.data.critic_data import held_out_goal_labels
from aitp.proving.data.theorems import load_theorem_set
from aitp.proving.data.training_data import select_training_data
from aitp.proving.env import Goal
from aitp.proving.learning import commit_traces, paired_proof_gain, search_theorems, train_slice
from aitp.proving.models.goal_critic import auc
from aitp.proving.models.prover_models import ProverModels
from aitp.proving.models.ranked_policy import Exploration
from aitp.proving.models.training import train_prover_models
from aitp.proving.search import Budget, SearchConfig, constant_critic, length_critic, make_search

# (name, search, critic): critic None is the search's own default without a critic given (BestFS: none)
VARIANTS = (
    ("bestfs", "bestfs", None),
    ("bestfs+learned", "bestfs", "learned"),
    ("htps+constant", "htps", "constant"),
    ("htps+length", "htps", "length"),
    ("htps+learned", "htps", "learned"),
    ("updown+constant", "updown", "constant"),
    ("updown+learned", "updown", "learned"),
)
COMPARISONS = (
    ("htps+constant", "htps+learned"),
    ("htps+length", "htps+learned"),
    ("bestfs", "bestfs+learned"),
    ("updown+constant", "updown+learned"),
    ("bestfs", "htps+constant"),
    ("bestfs", "updown+constant"),
    ("bestfs", "htps+learned"),
)
UNSTEERED = ("bestfs", "htps+constant")  # valid searches whose goal choices no critic steered: the AUC's goals


def auc_interval(scores: np.ndarray, labels: np.ndarray, n_boot: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap 95 % interval of the AUC over goals."""
    rng = np.random.default_rng(seed)
    draws = [auc(scores[i], labels[i]) for i in rng.integers(0, len(labels), size=(n_boot, len(labels)))]
    low, high = np.nanquantile(draws, [0.025, 0.975])
    return float(low), float(high)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's sizes and backend, checked before a prover starts."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=PROVER_BACKENDS, default="coq", help="prover; its loop config's settings")
    ap.add_argument("--train", type=int, default=300, help="train theorems searched for the training data")
    ap.add_argument("--valid", type=int, default=200, help="valid theorems compared (fixed, in library order)")
    ap.add_argument("--train-expansions", type=int, default=16)
    ap.add_argument("--train-tactics", type=int, default=10)
    ap.add_argument("--expansions", type=int, default=32, help="expansions per valid theorem, every variant")
    ap.add_argument("--tactics", type=int, default=6, help="tactics per goal on the valid theorems, every variant")
    ap.add_argument("--min-visits", type=int, default=1, help="critic label 0: unproved after this many visits")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--home", type=Path, default=None, help="aitp home (default: a temporary one)")
    ap.add_argument("--theorem-home", type=Path, default=None, help="where the extracted theorem set is cached")
    ap.add_argument("--json", type=Path, default=None)
    return ap.parse_args(argv)


def main() -> None:
    args = parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="aitp-prove-searches-"))
    loop = loop_proving(args.backend)
    library = load_theorem_set(loop.theorem_set_name, args.theorem_home or home)
    valid = library.split("valid")[: args.valid]
    start = time.perf_counter()
    prover = {"theorem_set": library.name, "tactic_timeout": loop.tactic_timeout, "prover_s": loop.prover_seconds}
    out: dict = {"args": vars(args) | {"home": str(home)}, "prover": prover, "variants": {}, "paired": []}

    def config(expansions: int, tactics: int) -> SearchConfig:
        budget = Budget(expansions, loop.prover_seconds, 120.0)
        return SearchConfig(budget=budget, tactics_per_goal=tactics, tactic_timeout=loop.tactic_timeout)

    with open_env(args.backend, tactic_timeout=loop.tactic_timeout) as env:
        env.set_premises(library.premise_map())
        untrained = ProverModels.untrained(args.backend, library)
        theorems = train_slice(library, 0, args.train, args.seed)
        explore = untrained.policy(library, Exploration(1.0, seed=args.seed))
        searched = search_theorems(
            env, theorems, make_search("bestfs", config(args.train_expansions, args.train_tactics)), explore, "data", 1
        )
        commit_traces(home, "data", 1, searched, "train")
        data = select_training_data(home, "data", 1, library, critic_min_visits=args.min_visits)
        models = train_prover_models(data, library, seed=args.seed)
        models.save(home / "checkpoints" / "trained")
        out["data"] = data.counts() | {"train_proved": searched.summary()["proved"], "train_searched": len(theorems)}
        out["critic_record"] = {k: v for k, v in models.record.items() if k.startswith("critic")}
        out["data_s"] = round(time.perf_counter() - start, 1)
        print(json.dumps({"data": out["data"], "critic": out["critic_record"], "s": out["data_s"]}), flush=True)

        critics = {"learned": models.critic, "constant": constant_critic, "length": length_critic, None: None}
        policy = models.policy(library)
        proved: dict[str, dict[str, bool]] = {}
        expansions: dict[str, dict[str, int]] = {}
        for name, algorithm, critic in VARIANTS:
            t0 = time.perf_counter()
            search = make_search(algorithm, config(args.expansions, args.tactics), critics[critic])
            result = search_theorems(env, valid, search, policy, f"valid-{name.replace('+', '.')}", 0, models.version)
            commit_traces(home, f"valid-{name.replace('+', '.')}", 0, result, "valid")
            s = result.summary()
            proved[name] = result.proved
            expansions[name] = {a.theorem: a.expansions for a in result.attempts}
            k = int(s["proved"])
            row = {
                "proved": k,
                "n": len(valid),
                "ci95": wilson(k, len(valid)),
                "expansions_per_proof": s["expansions_per_proof"],
                "prover_s": round(s["prover_seconds"], 2),
                "wall_s": round(time.perf_counter() - t0, 1),
            }
            out["variants"][name] = row
            print(json.dumps({name: row}), flush=True)

    for a, b in COMPARISONS:
        gain = paired_proof_gain(proved[a], proved[b], (a, b))
        both = [t for t in proved[a] if proved[a][t] and proved[b][t]]
        pair = {
            "a": a,
            "b": b,
            "gain": gain.to_dict(),
            "both_proved": len(both),
            "b_only": sum(proved[b][t] and not proved[a][t] for t in proved[a]),
            "a_only": sum(proved[a][t] and not proved[b][t] for t in proved[a]),
            "expansions_on_both": (
                float(np.mean([expansions[a][t] for t in both])) if both else None,
                float(np.mean([expansions[b][t] for t in both])) if both else None,
            ),
        }
        out["paired"].append(pair)
        print(json.dumps({f"{b} - {a}": str(gain), "b_only": pair["b_only"], "a_only": pair["a_only"]}), flush=True)

    labels: dict[str, int] = {}
    for name in UNSTEERED:
        for e in held_out_goal_labels(home, f"valid-{name.replace('+', '.')}", 0, min_visits=args.min_visits):
            labels[e.goal] = max(labels.get(e.goal, 0), e.label)
    goals = sorted(labels)
    y = np.array([labels[g] for g in goals], float)
    for critic_name, critic in (("learned", models.critic), ("length", length_critic)):
        scores = np.array(critic([Goal(g, "") for g in goals]), float)
        out.setdefault("auc", {})[critic_name] = {
            "auc": auc(scores, y),
            "ci95": auc_interval(scores, y),
            "goals": len(goals),
            "positives": int(y.sum()),
        }
    print(json.dumps({"auc": out["auc"]}), flush=True)
    out["wall_s"] = round(time.perf_counter() - start, 1)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
