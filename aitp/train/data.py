"""Training examples selected from the lake with SQL: kept samples (SFT), preference pairs (DPO), scored groups
(GRPO), demonstrations.

Nothing is handed over in memory: each stage commits to the lake and training reads it back here.
Every example records where it came from (iteration, item, group, sample), its group's
`keep_reason` and `keep_threshold` (the filter's rule), and the threshold it was selected with.
Eval questions never become training prompts: rows whose question is in the experiment's eval
items are left out, since small problem spaces would otherwise leak eval answers into training.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aitp.errors import AitpError
from aitp.train.config import TrainConfig

# The last message of a rollout's prompt is the task's question (see aitp.reasoning.prompt).
_QUESTION = "json_extract_string(prompt, '$[#-1].content')"
_EVAL_QUESTIONS = (
    "SELECT question FROM items WHERE experiment = $experiment AND split = 'eval' AND question IS NOT NULL"
)
# The first sample of each distinct completion of a group.
_DISTINCT = (
    "QUALIFY row_number() OVER (PARTITION BY iteration, item_id, group_id, completion ORDER BY sample_index) = 1"
)


class NoTrainingDataError(AitpError):
    """A selection that found nothing to train on."""


def _iterations(config: TrainConfig) -> str:
    return "iteration = $iteration" if config.data_iterations == "current" else "iteration <= $iteration"


def kept_samples_sql(config: TrainConfig) -> str:
    """SFT: completions of kept groups scoring above the threshold (expert iteration)."""
    return f"""
        SELECT 'rollout' AS source, iteration, item_id, task, group_id, sample_index,
               NULL::INTEGER AS rejected_index, prompt, completion, NULL::VARCHAR AS rejected,
               final_score AS score, NULL::DOUBLE AS rejected_score, keep_reason, keep_threshold
        FROM rollouts
        WHERE experiment = $experiment AND {_iterations(config)} AND coalesce(split, 'train') = 'train'
          AND group_kept AND final_score > $threshold AND completion IS NOT NULL
          AND {_QUESTION} NOT IN ({_EVAL_QUESTIONS})
        {_DISTINCT if config.distinct_completions else ""}
        ORDER BY iteration, item_id, group_id, sample_index"""


def preference_pairs_sql(config: TrainConfig) -> str:
    """DPO: (chosen, rejected) of one group, chosen above the threshold and scored higher; widest gaps first."""
    return f"""
        WITH kept AS (
            SELECT * FROM rollouts
            WHERE experiment = $experiment AND {_iterations(config)} AND coalesce(split, 'train') = 'train'
              AND group_kept AND completion IS NOT NULL AND final_score IS NOT NULL
              AND {_QUESTION} NOT IN ({_EVAL_QUESTIONS})),
        pairs AS (
            SELECT c.iteration, c.item_id, c.task, c.group_id, c.sample_index, r.sample_index AS rejected_index,
                   c.prompt, c.completion, r.completion AS rejected, c.final_score AS score,
                   r.final_score AS rejected_score, c.keep_reason, c.keep_threshold,
                   row_number() OVER (PARTITION BY c.iteration, c.group_id
                                      ORDER BY c.final_score - r.final_score DESC, c.sample_index, r.sample_index)
                       AS pair_rank
            FROM kept c JOIN kept r USING (iteration, item_id, group_id)
            WHERE c.final_score > $threshold AND r.final_score < c.final_score AND r.completion <> c.completion)
        SELECT 'pair' AS source, iteration, item_id, task, group_id, sample_index, rejected_index, prompt,
               completion, rejected, score, rejected_score, keep_reason, keep_threshold
        FROM pairs WHERE pair_rank <= $max_pairs
        ORDER BY iteration, item_id, group_id, pair_rank"""


def group_samples_sql(config: TrainConfig) -> str:
    """GRPO: every sample of the iteration's groups, with the tokens and log-probs its sampler recorded.

    Not only the kept groups: a group none of whose answers clears the threshold still ranks its answers (partial
    credit, the length penalty), and the peers train on every group whose scores differ."""
    return f"""
        SELECT 'rollout' AS source, iteration, item_id, task, group_id, sample_index,
               NULL::INTEGER AS rejected_index, prompt, completion, NULL::VARCHAR AS rejected,
               final_score AS score, NULL::DOUBLE AS rejected_score, keep_reason, keep_threshold,
               token_ids, token_logprobs
        FROM rollouts
        WHERE experiment = $experiment AND {_iterations(config)} AND coalesce(split, 'train') = 'train'
          AND final_score IS NOT NULL AND completion IS NOT NULL
          AND {_QUESTION} NOT IN ({_EVAL_QUESTIONS})
        ORDER BY iteration, item_id, group_id, sample_index"""


def with_advantages(rows: list[dict[str, Any]], config: TrainConfig) -> list[dict[str, Any]]:
    """GRPO examples: each sample with its group's advantage; groups whose scores are all equal (no advantage) are
    left out unless kept on purpose."""
    from aitp.train.grpo import group_advantages

    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        if row["token_ids"] is None or row["token_logprobs"] is None:
            raise NoTrainingDataError(
                f"rollout {row['group_id']}/{row['sample_index']} has no recorded tokens (an older lake): "
                "grpo trains on the sampler's own tokens, so run the iteration's rollouts again"
            )
        groups.setdefault((row["iteration"], row["item_id"], row["group_id"]), []).append(row)
    out = []
    for samples in groups.values():
        advantages = group_advantages([s["score"] for s in samples], config.grpo_scale_std, config.grpo_keep_uniform)
        if advantages is not None:
            out += [{**s, "advantage": a} for s, a in zip(samples, advantages)]
    return out


def demonstrations_sql(config: TrainConfig) -> str:
    """Demonstrations: each train item once (its latest iteration), its gold answer as the completion."""
    return f"""
        SELECT 'demonstration' AS source, iteration, item_id, task, question, gold_answer
        FROM items
        WHERE experiment = $experiment AND {_iterations(config)} AND split = 'train'
          AND gold_answer IS NOT NULL AND question NOT IN ({_EVAL_QUESTIONS})
        QUALIFY row_number() OVER (PARTITION BY item_id ORDER BY iteration DESC) = 1
        ORDER BY iteration, item_id"""


def demonstration_completion(gold_answer: str) -> str:
    """The completion a demonstration teaches: the answer in the tags the verifier extracts."""
    return f"<answer>{gold_answer}</answer>"


def _fetch(con, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    used = {k: v for k, v in params.items() if f"${k}" in sql}
    cursor = con.execute(sql, used)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _check_filtered(con, experiment: str, iteration: int, config: TrainConfig) -> None:
    sql = (
        f"SELECT count(*) FROM rollouts WHERE experiment = $experiment AND {_iterations(config)} AND group_kept IS NULL"
    )
    (unfiltered,) = con.execute(sql, {"experiment": experiment, "iteration": iteration}).fetchone()
    if unfiltered:
        raise NoTrainingDataError(
            f"{unfiltered} rollouts of experiment '{experiment}' up to iteration {iteration} have no keep decision: "
            "filter them (aitp.reasoning.filtering.filter_rows) before committing them to the lake"
        )


def demonstration(question: str, gold_answer: str, system_prompt: str | None) -> dict[str, str]:
    """The prompt (chat messages as JSON) and completion of one demonstration (None: the environment's prompt)."""
    from aitp.reasoning.prompt import SYSTEM_PROMPT

    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return {"prompt": json.dumps(messages), "completion": demonstration_completion(gold_answer)}


def _demonstrations(con, params: dict[str, Any], config: TrainConfig) -> list[dict[str, Any]]:
    out = []
    for row in _fetch(con, demonstrations_sql(config), params):
        taught = demonstration(row.pop("question"), row.pop("gold_answer"), config.system_prompt)
        out.append(
            {
                **row,
                "group_id": None,
                "sample_index": None,
                "rejected_index": None,
                **taught,
                "rejected": None,
                "score": None,
                "rejected_score": None,
                "keep_reason": "demonstration",
                "keep_threshold": None,
            }
        )
    return out


def select_examples(home: str | Path, experiment: str, iteration: int, config: TrainConfig) -> list[dict[str, Any]]:
    """The examples of one training stage, each with its provenance, keep reason and threshold."""
    from aitp.lake import connect

    params = {
        "experiment": experiment,
        "iteration": iteration,
        "threshold": config.threshold,
        "max_pairs": config.max_pairs_per_group,
    }
    con = connect(home)
    try:
        examples: list[dict[str, Any]] = []
        if not config.demonstrations_only:
            _check_filtered(con, experiment, iteration, config)
            sql = {"sft": kept_samples_sql, "dpo": preference_pairs_sql, "grpo": group_samples_sql}[config.objective]
            rows = _fetch(con, sql(config), params)
            examples += with_advantages(rows, config) if config.objective == "grpo" else rows
        if config.demonstrations and config.objective == "sft":
            examples += _demonstrations(con, params, config)
    finally:
        con.close()
    if not examples:
        kind = {"sft": "kept samples", "dpo": "preference pairs", "grpo": "groups of differing scores"}
        kind = kind[config.objective]
        what = f"{kind} scoring above {config.threshold:g}"
        if config.demonstrations_only:
            what = "demonstrations (train items with gold answers)"
        raise NoTrainingDataError(
            f"no {what} for experiment '{experiment}' iteration {iteration} in the lake: "
            "commit rollouts/items for it first, lower the threshold, or turn on demonstrations"
        )
    for ex in examples:
        ex["threshold"] = None if ex["source"] == "demonstration" else config.threshold
    return examples
