"""Training threads on a small CPU: the loop tests' miniature fit with 1 thread vs every core, alternated.

    .venv/bin/python benchmarks/fit_threads.py            # --steps 150 --rounds 2 --threads 1,2

A fit pins torch to every core the process may use (`TrainConfig.threads: None`). For a 32-wide model the
work of a step is smaller than the cost of waking a second thread, and on a machine whose cores other
processes also use (a test's Prefect server and Dask worker, other jobs) the step waits on a descheduled
thread. Prints wall and CPU seconds per fit and the ratio to the first thread count, from one run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from aitp.train.config import TrainConfig
from aitp.train.run import fit

# the miniature of tests/loop/helpers.py: its policy, batch and sequence length
BASE = {
    "backend": "tiny",
    "seed": 0,
    "config": {"n_layer": 1, "n_head": 2, "n_kv_head": 1, "d_model": 32, "max_seq_len": 192},
}


def examples(n: int = 16) -> list[dict]:
    """Short arithmetic prompts with answer-tagged completions, about the miniature's length."""
    system = {"role": "system", "content": "Answer in <answer></answer>."}
    return [
        {
            "prompt": [system, {"role": "user", "content": f"What is {i} + {i + 1}? Give the number. " * 2}],
            "completion": f"<answer>{2 * i + 1}</answer>",
        }
        for i in range(n)
    ]


def time_fit(threads: int, steps: int) -> tuple[float, float]:
    """Wall and CPU seconds of one fit (model load, steps and checkpoint save)."""
    config = TrainConfig(steps=steps, batch_size=4, max_len=128, threads=threads)
    with tempfile.TemporaryDirectory() as root:
        wall, cpu = time.perf_counter(), time.process_time()
        fit(examples(), BASE, config, Path(root) / "out")
        return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2, help="each thread count is timed this many times, alternated")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    time_fit(counts[0], 2)  # imports and first-call costs out of the timings
    rows = [(t, *time_fit(t, args.steps)) for _ in range(args.rounds) for t in counts]
    first = sum(w for t, w, _ in rows if t == counts[0]) / args.rounds
    print("| threads | steps | wall s | CPU s | wall vs first |\n|---:|---:|---:|---:|---:|")
    for t, wall, cpu in rows:
        print(f"| {t} | {args.steps} | {wall:.2f} | {cpu:.2f} | {wall / first:.1f}x |")


if __name__ == "__main__":
    main()
