"""Rows and runners shared by the lake tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def rollout_rows(
    n_items: int = 2,
    group_size: int = 2,
    task: str = "basic_arithmetic",
    tag: str = "v1",
    **overrides: Any,
) -> list[dict[str, Any]]:
    """Rollouts of n_items groups; sample 0 of each group passes, the others fail with a format error."""
    rows = []
    for i in range(n_items):
        for s in range(group_size):
            rows.append(
                {
                    "item_id": f"{task}-item{i}",
                    "task": task,
                    "config_json": {"size": 10},
                    "seed": 7,
                    "item_index": i,
                    "split": "train",
                    "difficulty_level": i % 2,
                    "gold_answer": str(i),
                    "group_id": f"g{i}",
                    "sample_index": s,
                    "prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": f"q{i}"}],
                    "completion": f"{tag}: <answer>{i if s == 0 else 'x'}</answer>",
                    "extracted_answer": str(i) if s == 0 else "x",
                    "raw_score": 1.0 if s == 0 else 0.0,
                    "lenient_score": 1.0 if s == 0 else 0.0,
                    "final_score": 0.9 if s == 0 else 0.0,
                    "format_error": None if s == 0 else "no_answer_tag",
                    "prompt_tokens": 10,
                    "completion_tokens": 5,
                    "token_logprobs": [-0.5] * 5,
                    "finish_reason": "stop",
                    "latency_s": 0.5,
                    "worker": "w0",
                    "model_version": "m0",
                    "group_kept": i % 2 == 0,
                    "keep_reason": "mixed_scores" if i % 2 == 0 else "all_same",
                    **overrides,
                }
            )
    return rows


def cli(*args: str, input: str | None = None):
    """Invoke the typer app in-process; AitpErrors surface as result.exception."""
    from typer.testing import CliRunner  # the CLI pulls in every command module: only when needed

    from aitp.cli import app

    return CliRunner().invoke(app, list(args), input=input)


def cli_subprocess(*args: str) -> subprocess.CompletedProcess:
    """Run `python -m aitp` for real, as a user would (exit codes, stderr)."""
    return subprocess.run([sys.executable, "-m", "aitp", *args], cwd=REPO, capture_output=True, text=True, timeout=120)
