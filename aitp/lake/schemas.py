"""The lake's tables: one pyarrow schema each, and building Arrow tables that fit them.

`experiment` and `iteration` lead every schema; they are the hive partition keys, so they live in
the directory names and not inside the Parquet files. Columns may be added to a schema later: old
partitions simply read them as NULL. Never rename or retype a column; add a new one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from aitp.lake.errors import SchemaError, UnknownTableError

PARTITION_COLUMNS = ("experiment", "iteration")
TIMESTAMP = pa.timestamp("us", tz="UTC")


def col(name: str, type_: pa.DataType, doc: str, *, key: bool = False, json_text: bool = False) -> pa.Field:
    """A column: `key` columns may not be null; `json_text` columns take dicts/lists and store JSON."""
    meta = {"doc": doc, **({"json": "1"} if json_text else {})}
    return pa.field(name, type_, nullable=not key, metadata=meta)


def _table(*fields: pa.Field) -> pa.Schema:
    head = [
        col("experiment", pa.string(), "experiment name (hive partition key)", key=True),
        col("iteration", pa.int64(), "loop iteration (hive partition key)", key=True),
    ]
    tail = [col("created_at", TIMESTAMP, "when the row was written (UTC); filled at write time if null")]
    return pa.schema(head + list(fields) + tail)


_ITEM_IDENTITY = (
    col("item_id", pa.string(), "stable id: hash of (task, config, seed, index)", key=True),
    col("task", pa.string(), "reasoning-gym task name", key=True),
    col("config_json", pa.string(), "task config of the item's dataset, JSON", json_text=True),
    col("seed", pa.int64(), "dataset seed of the item"),
    col("item_index", pa.int64(), "index of the item in its dataset"),
    col("split", pa.string(), "train or eval"),
    col("difficulty_level", pa.int32(), "curriculum level, null when none"),
)

SCHEMAS: dict[str, pa.Schema] = {
    "items": _table(
        *_ITEM_IDENTITY,
        col("question", pa.string(), "question text as generated"),
        col("gold_answer", pa.string(), "reference answer (an accepted example for solution-checked tasks)"),
        col("metadata_json", pa.string(), "reasoning-gym metadata the verifier needs, JSON", json_text=True),
    ),
    "rollouts": _table(
        *_ITEM_IDENTITY,
        col("gold_answer", pa.string(), "reference answer"),
        col("group_id", pa.string(), "the group of samples drawn for one item", key=True),
        col("sample_index", pa.int32(), "index of the sample in its group", key=True),
        col("prompt", pa.string(), "chat messages sent to the model, JSON list", json_text=True),
        col("completion", pa.string(), "model output text"),
        col("extracted_answer", pa.string(), "answer extracted from the completion"),
        col("raw_score", pa.float64(), "strict score (answer-tag rules), 0..1"),
        col("lenient_score", pa.float64(), "lenient score (audit only), 0..1"),
        col("final_score", pa.float64(), "score after shaping (length penalty), used for training"),
        col("format_error", pa.string(), "why the format was rejected, null when fine"),
        col("prompt_tokens", pa.int32(), "tokens in the prompt"),
        col("completion_tokens", pa.int32(), "tokens in the completion"),
        col("token_logprobs", pa.list_(pa.float32()), "log-probability of each completion token"),
        col("finish_reason", pa.string(), "stop, length, error…"),
        col("latency_s", pa.float64(), "wall seconds to generate this sample"),
        col("worker", pa.string(), "worker that generated it"),
        col("model_version", pa.string(), "model (checkpoint) that generated it"),
        col("group_kept", pa.bool_(), "whether the group went to training"),
        col("keep_reason", pa.string(), "why the group was kept or dropped"),
        col("keep_threshold", pa.float64(), "the filter threshold the keep decision was made with"),
        col(
            "sampler_json",
            pa.string(),
            "the sampling call that made the row: rows, seconds, tokenise_s; the fast decoder adds slots, "
            "admissions, engine_s, admit_s, wait_s, completions_s (where the time went); null: not kept; JSON",
            json_text=True,
        ),
        col("token_ids", pa.list_(pa.int32()), "the completion's tokens as sampled (token_logprobs are theirs)"),
    ),
    "evals": _table(
        col("eval_name", pa.string(), "which evaluation (e.g. heldout)"),
        col("model_version", pa.string(), "model evaluated", key=True),
        col("task", pa.string(), "task evaluated", key=True),
        col("split", pa.string(), "split evaluated"),
        col("difficulty_level", pa.int32(), "curriculum level, null when none"),
        col("n_items", pa.int64(), "distinct items"),
        col("n_samples", pa.int64(), "samples scored"),
        col("n_pass", pa.int64(), "samples with strict score 1"),
        col("pass_rate", pa.float64(), "n_pass / n_samples"),
        col("mean_score", pa.float64(), "mean strict score"),
        col("format_error_rate", pa.float64(), "share of samples with a format error"),
        col("mean_completion_tokens", pa.float64(), "mean completion length"),
        col("seconds", pa.float64(), "wall seconds the evaluation took"),
    ),
    "iterations": _table(
        col("flow_run_id", pa.string(), "Prefect flow run id"),
        col("mlflow_run_id", pa.string(), "MLflow run id"),
        col("config_hash", pa.string(), "hash of the resolved run config"),
        col("config_json", pa.string(), "the resolved run config, JSON", json_text=True),
        col("model_in", pa.string(), "model version the iteration started from"),
        col("model_out", pa.string(), "model version it trained"),
        col("promoted", pa.bool_(), "whether model_out became the champion"),
        col("promote_reason", pa.string(), "why it was or was not promoted"),
        col("champion_version", pa.string(), "registered version that is champion after the iteration"),
        col("champion_model", pa.string(), "model version (checkpoint fingerprint) of that champion"),
        col("eval_pass_rate", pa.float64(), "held-out pass rate of model_out"),
        col("champion_pass_rate", pa.float64(), "held-out pass rate of the champion after the iteration"),
        col("kept_group_rate", pa.float64(), "share of rollout groups kept for training"),
        col("flow_run_name", pa.string(), "Prefect flow run name, <experiment>-iter-<k>"),
        col("code_version", pa.string(), "aitp version plus git commit the iteration ran"),
        col("stage", pa.string(), "last stage committed: items, rollouts, train, eval, promote"),
        col("status", pa.string(), "running, done, failed; repaired: a repair removed shards the loop must redo"),
        col("started_at", TIMESTAMP, "iteration start (UTC)"),
        col("finished_at", TIMESTAMP, "iteration end (UTC)"),
        col("repaired_shards", pa.list_(pa.string()), "shards (<table>/<shard>) `aitp lake check --repair` removed"),
        col(
            "logprob_gap",
            pa.float64(),
            "grpo: mean |sampler's recorded - trainer's recomputed| log-prob of the trained tokens; null: not measured",
        ),
        col("rollouts_model", pa.string(), "model version that sampled the iteration's rollouts; null: no rollouts"),
        col(
            "policy_lag",
            pa.int32(),
            "champions crowned between rollouts_model and model_in (0: on-policy; rollouts.overlap: 0 or 1)",
        ),
    ),
    "proof_nodes": _table(
        col("theorem_id", pa.string(), "theorem searched", key=True),
        col("search_id", pa.string(), "one proof search", key=True),
        col("node_id", pa.string(), "node in the search tree", key=True),
        col("parent_node_id", pa.string(), "parent node, null for the root"),
        col("depth", pa.int32(), "depth in the tree"),
        col("goal", pa.string(), "proof state (goals) at this node"),
        col("status", pa.string(), "open, proved, failed, error"),
        col("visits", pa.int32(), "times the search visited the node"),
        col("value_estimate", pa.float64(), "the search's value of the node"),
        col("model_version", pa.string(), "model that guided the search"),
        col("worker", pa.string(), "worker that ran the search"),
        col("critic_value", pa.float64(), "goal-value critic's P(provable), null when the search uses none"),
        col("cumulative_logprob", pa.float64(), "best total tactic log-prob of a path from the root"),
        col("expanded_at_step", pa.int32(), "search step (expansion count) at which it was expanded; null: never"),
        col("is_root", pa.bool_(), "whether it is the theorem's goal"),
        col("in_proof", pa.bool_(), "whether it is a goal of the proof found"),
        col("backend", pa.string(), "prover: coq, hol-light, leandojo"),
        col("search", pa.string(), "search algorithm: bestfs, bfs, htps, fringe, updown"),
        col("split", pa.string(), "theorem's split: train, valid, test"),
        col(
            "prover_restarts",
            pa.int32(),
            "times the prover died or hung and a fresh session took over during the search (root row; null elsewhere)",
        ),
    ),
    "eval_samples": _table(
        col("eval_name", pa.string(), "which evaluation, <name>@<version>"),
        col("model_version", pa.string(), "model evaluated", key=True),
        col("item_id", pa.string(), "eval item", key=True),
        col("task", pa.string(), "task of the item"),
        col("difficulty_level", pa.int32(), "curriculum level, null when none"),
        col("sample_index", pa.int32(), "index of the sample for this item", key=True),
        col("completion", pa.string(), "model output text"),
        col("extracted_answer", pa.string(), "answer extracted from the completion"),
        col("gold_answer", pa.string(), "reference answer"),
        col("score", pa.float64(), "strict score, 0..1"),
        col("passed", pa.bool_(), "strict score is 1"),
        col("format_error", pa.string(), "why the format was rejected, null when fine"),
        col("completion_tokens", pa.int32(), "tokens in the completion"),
    ),
    "proof_edges": _table(
        col("theorem_id", pa.string(), "theorem searched", key=True),
        col("search_id", pa.string(), "one proof search", key=True),
        col("edge_id", pa.string(), "tactic application", key=True),
        col("src_node_id", pa.string(), "node the tactic was applied to", key=True),
        col("dst_node_id", pa.string(), "resulting node, null when the tactic failed"),
        col("tactic", pa.string(), "tactic text"),
        col("tactic_logprob", pa.float64(), "model log-probability of the tactic"),
        col("outcome", pa.string(), "success, error, timeout, no_progress"),
        col("error", pa.string(), "checker message when it failed"),
        col("latency_s", pa.float64(), "seconds to check the tactic"),
        col("model_version", pa.string(), "model that proposed it"),
        col("child_node_ids", pa.list_(pa.string()), "every goal the tactic left (a hyperedge), in order"),
        col("step", pa.int32(), "search step (expansion count) at which the tactic ran"),
        col("cyclic", pa.bool_(), "whether some child can reach the source goal"),
        col("visits", pa.int32(), "times the search chose the edge (HTPS)"),
        col("value_mean", pa.float64(), "mean backed-up value of the edge (HTPS), null when unvisited"),
        col("in_proof", pa.bool_(), "whether the proof found uses the edge"),
        col("backend", pa.string(), "prover: coq, hol-light, leandojo"),
        col("search", pa.string(), "search algorithm: bestfs, bfs, htps, fringe, updown"),
    ),
    "proofs": _table(
        col("theorem_id", pa.string(), "theorem proved", key=True),
        col("proof_id", pa.string(), "this proof", key=True),
        col("search_id", pa.string(), "search that found it"),
        col("statement", pa.string(), "theorem statement"),
        col("proof_text", pa.string(), "the proof as checked"),
        col("tactics", pa.list_(pa.string()), "tactic sequence"),
        col("n_steps", pa.int32(), "number of tactics"),
        col("verified", pa.bool_(), "whether the checker accepted the whole proof"),
        col("verifier", pa.string(), "checker and version"),
        col("model_version", pa.string(), "model that found it"),
        col("worker", pa.string(), "worker that found it"),
        col("latency_s", pa.float64(), "search seconds until found"),
        col("human_proof", pa.string(), "the library's own proof of the theorem"),
        col("search", pa.string(), "search algorithm that found it"),
        col("split", pa.string(), "theorem's split: train, valid, test"),
        col("expansions", pa.int32(), "goals expanded by the search"),
        col("prover_seconds", pa.float64(), "seconds the search spent inside the prover"),
    ),
    "human_steps": _table(
        col("theorem_id", pa.string(), "theorem whose human proof was replayed, <backend>:<name>", key=True),
        col("step_index", pa.int32(), "index of the tactic sentence among the replayed steps, from 0", key=True),
        col("theorem", pa.string(), "theorem name"),
        col("module", pa.string(), "library module (file) that states the theorem"),
        col("split", pa.string(), "theorem's split: always train (valid and test theorems are never replayed)"),
        col("goal_before", pa.string(), "the goal the tactic acted on, as search renders goals"),
        col("tactic", pa.string(), "the tactic sentence as written (`;`-chains whole), without its period"),
        col("goals_after", pa.list_(pa.string()), "the goals the tactic left, in order; empty: it closed the goal"),
        col("n_goals_after", pa.int32(), "number of goals the tactic left"),
        col("allowlisted", pa.bool_(), "whether the tactic passes the search's allowlist (trainable as is)"),
        col("latency_s", pa.float64(), "seconds Coq took to run the tactic"),
    ),
    "human_replays": _table(
        col("theorem_id", pa.string(), "theorem whose human proof was replayed, <backend>:<name>", key=True),
        col("theorem", pa.string(), "theorem name"),
        col("module", pa.string(), "library module (file) that states the theorem"),
        col("split", pa.string(), "theorem's split: always train"),
        col("status", pa.string(), "complete: no goal left; partial: steps, then a failure; failed: no step"),
        col("n_sentences", pa.int32(), "sentences of the script (tactics, bullets, braces, commands)"),
        col("n_steps", pa.int32(), "tactic steps recorded in human_steps"),
        col("n_allowlisted", pa.int32(), "recorded steps that pass the allowlist"),
        col("reason", pa.string(), "why it stopped: open:, step: or end:, then the message; null when complete"),
        col("failed_sentence", pa.string(), "the sentence that failed, null when complete or at the opening"),
        col("seconds", pa.float64(), "wall seconds the replay took"),
        col("human_proof", pa.string(), "the script as extracted from the library source"),
    ),
    "rescores": _table(
        col("item_id", pa.string(), "rollout key: item", key=True),
        col("group_id", pa.string(), "rollout key: group", key=True),
        col("sample_index", pa.int32(), "rollout key: sample", key=True),
        col("task", pa.string(), "task of the rollout"),
        col("verifier_version", pa.string(), "verifier that re-scored"),
        col("rescored_raw_score", pa.float64(), "strict score by the current verifier"),
        col("rescored_lenient_score", pa.float64(), "lenient score by the current verifier"),
        col("rescored_format_error", pa.string(), "format error by the current verifier"),
        col("rescored_extracted_answer", pa.string(), "answer extracted by the current verifier"),
        col("raw_changed", pa.bool_(), "strict score differs from the stored one"),
        col("lenient_changed", pa.bool_(), "lenient score differs from the stored one"),
        col("format_changed", pa.bool_(), "format verdict differs from the stored one"),
    ),
}

TABLES: tuple[str, ...] = tuple(SCHEMAS)


def schema_of(table: str) -> pa.Schema:
    """The schema of a lake table, or a one-line error listing the tables."""
    if table not in SCHEMAS:
        raise UnknownTableError(f"unknown table '{table}': use one of {', '.join(TABLES)}")
    return SCHEMAS[table]


def file_schema(table: str) -> pa.Schema:
    """The schema stored inside the Parquet files: the table's schema less the partition keys."""
    schema = schema_of(table)
    return pa.schema([f for f in schema if f.name not in PARTITION_COLUMNS])


def _is_json(field: pa.Field) -> bool:
    return bool(field.metadata) and field.metadata.get(b"json") == b"1"


def _json_texts(values: list[Any]) -> list[str | None]:
    """Each value as sorted-key JSON; one object shared by many rows (a group's prompt, a task's config) once."""
    texts: dict[int, str] = {}  # by identity: every object stays referenced by `values` meanwhile
    out: list[str | None] = []
    for v in values:
        if v is None or isinstance(v, str):
            out.append(v)
            continue
        text = texts.get(id(v))
        if text is None:
            text = texts[id(v)] = json.dumps(v, sort_keys=True)
        out.append(text)
    return out


def _column(field: pa.Field, values: list[Any]) -> pa.Array:
    if _is_json(field):
        values = _json_texts(values)
    try:
        return pa.array(values, type=field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise SchemaError(f"column '{field.name}' wants {field.type}: {exc}") from exc


def _finish(table: str, schema: pa.Schema, arrays: list[pa.Array | pa.ChunkedArray]) -> pa.Table:
    now = pa.scalar(datetime.now(UTC), type=TIMESTAMP)
    out = []
    for field, array in zip(schema, arrays):
        if field.name == "created_at" and array.null_count:
            array = pc.fill_null(array, now)
        # Partition keys may be absent from rows: `write_partition` takes them from its arguments.
        if not field.nullable and array.null_count and field.name not in PARTITION_COLUMNS:
            raise SchemaError(f"column '{field.name}' of table '{table}' is a key and may not be null")
        out.append(array)
    return pa.Table.from_arrays(out, schema=schema)


def _check_names(table: str, schema: pa.Schema, names: Iterable[str]) -> None:
    unknown = sorted(set(names) - set(schema.names))
    if unknown:
        raise SchemaError(
            f"unknown column(s) {', '.join(unknown)} for table '{table}': known are {', '.join(schema.names)}"
        )


def rows_to_table(table: str, rows: Iterable[Mapping[str, Any]], schema: pa.Schema | None = None) -> pa.Table:
    """An Arrow table of a lake table from dict rows; missing nullable columns become null."""
    schema = schema or schema_of(table)
    rows = list(rows)
    _check_names(table, schema, {k for row in rows for k in row})
    arrays = [_column(field, [row.get(field.name) for row in rows]) for field in schema]
    return _finish(table, schema, arrays)


def conform(table: str, data: pa.Table, schema: pa.Schema | None = None) -> pa.Table:
    """An Arrow table cast to a lake table's schema: columns reordered and cast, missing ones null."""
    schema = schema or schema_of(table)
    _check_names(table, schema, data.column_names)
    arrays = []
    for field in schema:
        if field.name not in data.column_names:
            arrays.append(pa.nulls(data.num_rows, field.type))
            continue
        try:
            arrays.append(data[field.name].cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise SchemaError(f"column '{field.name}' wants {field.type}: {exc}") from exc
    return _finish(table, schema, arrays)


_DUCKDB_SCALARS = {
    pa.string(): "VARCHAR",
    pa.large_string(): "VARCHAR",
    pa.bool_(): "BOOLEAN",
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.date32(): "DATE",
}


def duckdb_type(type_: pa.DataType) -> str:
    """The DuckDB type name of an Arrow type used in the schemas."""
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return duckdb_type(type_.value_type) + "[]"
    if pa.types.is_timestamp(type_):
        return "TIMESTAMPTZ" if type_.tz else "TIMESTAMP"
    if type_ in _DUCKDB_SCALARS:
        return _DUCKDB_SCALARS[type_]
    raise TypeError(f"no DuckDB type for {type_}")
