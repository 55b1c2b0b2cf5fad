"""A DuckDB connection over the lake: one view per table, and curated views for common questions.

The views are a snapshot: they list the files committed when `connect` ran. Reconnect to see newer
commits. A table whose files cannot be bound (truncated, missing) gets a view that raises an error
naming the file and the fix when scanned; the other tables read as usual. Pass rate counts a
sample as passed when its strict score (`raw_score`) is 1.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from aitp.lake.catalog import Commit, as_lake, commits
from aitp.lake.integrity import file_problem
from aitp.lake.schemas import TABLES, duckdb_type, schema_of
from aitp.lake.storage import Lake
from aitp.paired import Z95, wilson_sql

PASS_LOW, PASS_HIGH = wilson_sql("pass_rate", "n")
PROOF_LOW, PROOF_HIGH = wilson_sql("proof_rate", "n_searched")

CURATED_VIEWS: dict[str, str] = {
    "pass_rate": f"""
        WITH s AS (
            SELECT experiment, iteration, split, task, difficulty_level,
                   count(raw_score) AS n, count(*) FILTER (WHERE raw_score >= 1.0) AS n_pass,
                   avg(final_score) AS mean_final_score
            FROM rollouts GROUP BY ALL),
        p AS (SELECT *, n_pass / nullif(n, 0)::DOUBLE AS pass_rate, {Z95}::DOUBLE AS z FROM s)
        SELECT experiment, iteration, split, task, difficulty_level, n, n_pass, pass_rate,
               {PASS_LOW} AS ci95_low,
               {PASS_HIGH} AS ci95_high,
               mean_final_score
        FROM p ORDER BY ALL""",
    # Which model sampled each rollout, which model trained on it and which model that training made
    # (rollouts.overlap samples with the previous iteration's starting model: policy_lag 0 or 1).
    "rollout_lineage": """
        SELECT r.experiment, r.iteration, r.group_id, r.sample_index, r.model_version AS sampled_by,
               i.model_in AS trained_from, i.model_out AS trained_into, i.policy_lag
        FROM rollouts r LEFT JOIN iterations i ON i.experiment = r.experiment AND i.iteration = r.iteration""",
    "format_violations": """
        SELECT experiment, iteration, task, count(*) AS n_rollouts,
               count(format_error) AS n_format_errors,
               count(format_error) / count(*)::DOUBLE AS format_error_rate,
               mode(format_error) AS top_format_error
        FROM rollouts GROUP BY ALL ORDER BY ALL""",
    "groups": """
        SELECT experiment, iteration, split, task, item_id, group_id, count(*) AS n_samples,
               avg(final_score) AS mean_final_score, bool_or(group_kept) AS kept,
               any_value(keep_reason) AS keep_reason,
               sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)) AS tokens,
               sum(coalesce(latency_s, 0)) AS seconds, any_value(model_version) AS model_version
        FROM rollouts GROUP BY experiment, iteration, split, task, item_id, group_id""",
    # Group questions from rollout rows, without regrouping them (far cheaper on a large lake:
    # benchmarks/results/history-lake.md): every row carries its group's decision (group_kept, keep_reason),
    # and each group has exactly one sample 0.
    "group_decisions": """
        SELECT experiment, iteration, task, group_kept AS kept, keep_reason,
               count(*) FILTER (WHERE sample_index = 0) AS n_groups, count(*) AS n_rollouts
        FROM rollouts WHERE group_kept IS NOT NULL GROUP BY ALL ORDER BY ALL""",
    "cost_per_kept_group": """
        WITH c AS (
            SELECT experiment, iteration, count(*) FILTER (WHERE sample_index = 0) AS n_groups,
                   count(*) FILTER (WHERE sample_index = 0 AND group_kept) AS n_kept_groups,
                   sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)) AS tokens,
                   sum(coalesce(latency_s, 0)) AS seconds
            FROM rollouts WHERE group_kept IS NOT NULL GROUP BY ALL)
        SELECT *, tokens / nullif(n_kept_groups, 0)::DOUBLE AS tokens_per_kept_group,
               seconds / nullif(n_kept_groups, 0)::DOUBLE AS seconds_per_kept_group
        FROM c ORDER BY ALL""",
    # New vs retained proofs per iteration and split: a theorem is new the first iteration any search of its split
    # proved it, retained after; proof length is the shortest proof of the iteration.
    "proof_progress": """
        WITH proved AS (
            SELECT experiment, iteration, split, theorem_id, min(n_steps) AS n_steps FROM proofs
            WHERE verified IS DISTINCT FROM false GROUP BY ALL),
        first AS (
            SELECT experiment, split, theorem_id, min(iteration) AS first_iteration FROM proved GROUP BY ALL),
        per AS (
            SELECT p.experiment, p.iteration, p.split, count(*) AS n_proved,
                   count(*) FILTER (WHERE f.first_iteration = p.iteration) AS n_new,
                   count(*) FILTER (WHERE f.first_iteration < p.iteration) AS n_retained,
                   avg(p.n_steps) AS mean_proof_length
            FROM proved p JOIN first f ON f.experiment = p.experiment AND f.theorem_id = p.theorem_id
                AND f.split IS NOT DISTINCT FROM p.split
            GROUP BY ALL)
        SELECT experiment, iteration, split, n_proved, n_new, n_retained,
               sum(n_new) OVER (PARTITION BY experiment, split ORDER BY iteration) AS n_proved_to_date,
               mean_proof_length
        FROM per ORDER BY ALL""",
    # Per iteration and split: searched, proved (Wilson 95 %), new vs retained and proof length (`proof_progress`),
    # the rate of tactics the prover accepted, the search's cost per proof, and how often its prover died or hung
    # and was replaced (restarts). On `valid` the searches are the iteration's evaluation of its challenger; on
    # `train` the exploring search of the iteration's slice.
    "proof_search": f"""
        WITH roots AS (
            SELECT experiment, iteration, split, search_id, theorem_id, prover_restarts FROM proof_nodes WHERE is_root),
        searched AS (
            SELECT experiment, iteration, split, count(DISTINCT theorem_id) AS n_searched,
                   sum(coalesce(prover_restarts, 0)) AS prover_restarts FROM roots GROUP BY ALL),
        expanded AS (
            SELECT r.experiment, r.iteration, r.split, count(*) AS expansions
            FROM proof_nodes n JOIN roots r USING (experiment, iteration, search_id)
            WHERE n.expanded_at_step IS NOT NULL GROUP BY ALL),
        tactics AS (
            SELECT r.experiment, r.iteration, r.split, count(*) AS n_tactics,
                   count(*) FILTER (WHERE e.outcome = 'success') AS n_valid_tactics,
                   sum(coalesce(e.latency_s, 0)) AS prover_seconds
            FROM proof_edges e JOIN roots r USING (experiment, iteration, search_id) GROUP BY ALL),
        j AS (
            SELECT s.experiment, s.iteration, s.split, s.n_searched, s.prover_restarts,
                   coalesce(p.n_proved, 0) AS n_proved,
                   coalesce(p.n_new, 0) AS n_new, coalesce(p.n_retained, 0) AS n_retained,
                   coalesce(p.n_proved_to_date, 0) AS n_proved_to_date, p.mean_proof_length,
                   t.n_tactics, t.n_valid_tactics, coalesce(x.expansions, 0) AS expansions,
                   coalesce(t.prover_seconds, 0) AS prover_seconds, {Z95}::DOUBLE AS z
            FROM searched s LEFT JOIN proof_progress p USING (experiment, iteration, split)
            LEFT JOIN tactics t USING (experiment, iteration, split)
            LEFT JOIN expanded x USING (experiment, iteration, split)),
        r AS (SELECT *, n_proved / nullif(n_searched, 0)::DOUBLE AS proof_rate FROM j)
        SELECT experiment, iteration, split, n_searched, n_proved, proof_rate,
               {PROOF_LOW} AS ci95_low,
               {PROOF_HIGH} AS ci95_high,
               n_new, n_retained, n_proved_to_date, mean_proof_length,
               n_valid_tactics / nullif(n_tactics, 0)::DOUBLE AS valid_tactic_rate,
               expansions / nullif(n_proved, 0)::DOUBLE AS expansions_per_proof,
               prover_seconds / nullif(n_proved, 0)::DOUBLE AS prover_seconds_per_proof,
               prover_restarts
        FROM r ORDER BY ALL""",
    "lineage": """
        WITH train AS (
            SELECT experiment, iteration, count(DISTINCT (item_id, group_id)) AS train_groups,
                   count(*) AS train_rollouts, string_agg(DISTINCT task, ',' ORDER BY task) AS train_tasks
            FROM rollouts WHERE group_kept GROUP BY ALL),
        ev AS (
            SELECT experiment, model_version, sum(n_pass) / nullif(sum(n_samples), 0)::DOUBLE AS pass_rate,
                   sum(n_samples) AS samples
            FROM evals GROUP BY ALL)
        SELECT i.experiment, i.iteration, i.flow_run_id, i.mlflow_run_id, i.config_hash,
               i.model_in, i.model_out, i.promoted, i.promote_reason,
               t.train_groups, t.train_rollouts, t.train_tasks,
               e_in.pass_rate AS model_in_pass_rate, e_out.pass_rate AS model_out_pass_rate,
               e_out.samples AS model_out_eval_samples
        FROM iterations i
        LEFT JOIN train t USING (experiment, iteration)
        LEFT JOIN ev e_out ON e_out.experiment = i.experiment AND e_out.model_version = i.model_out
        LEFT JOIN ev e_in ON e_in.experiment = i.experiment AND e_in.model_version = i.model_in
        ORDER BY i.experiment, i.iteration""",
    "rollouts_rescored": """
        SELECT r.*, s.verifier_version, s.rescored_raw_score, s.rescored_lenient_score,
               s.rescored_format_error, s.rescored_extracted_answer,
               s.raw_changed, s.lenient_changed, s.format_changed
        FROM rollouts r
        LEFT JOIN rescores s USING (experiment, iteration, item_id, group_id, sample_index)""",
    "rescore_changes": """
        SELECT experiment, iteration, task, any_value(verifier_version) AS verifier_version,
               count(*) AS n_rollouts, count(*) FILTER (WHERE raw_changed) AS n_raw_changed,
               count(*) FILTER (WHERE lenient_changed) AS n_lenient_changed,
               count(*) FILTER (WHERE format_changed) AS n_format_changed
        FROM rescores GROUP BY experiment, iteration, task ORDER BY ALL""",
}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table_view_sql(lake: Lake, table: str, files: list[str]) -> str:
    """A view of a table: its full schema (typed, empty) unioned by name with its committed files."""
    typed = ", ".join(f"CAST(NULL AS {duckdb_type(f.type)}) AS {_ident(f.name)}" for f in schema_of(table))
    sql = f"SELECT {typed} WHERE false"
    if files:
        paths = ", ".join(_quote(lake.duckdb_path(p)) for p in files)
        sql += (
            f" UNION ALL BY NAME SELECT * FROM read_parquet([{paths}], hive_partitioning = true,"
            " union_by_name = true, hive_types = {'experiment': VARCHAR, 'iteration': BIGINT})"
        )
    return sql


def unreadable_view_sql(table: str, message: str) -> str:
    """A view with the table's columns that raises `message` when scanned, so other tables still read."""
    typed = ", ".join(f"CAST(NULL AS {duckdb_type(f.type)}) AS {_ident(f.name)}" for f in schema_of(table))
    return f"SELECT {typed} FROM range(1) WHERE error({_quote(message)}) IS NULL"


def bad_files(lake: Lake, found: list[Commit]) -> list[tuple[str, str]]:
    """(path as users see it, why) of each committed file that is absent or not what its manifest recorded."""
    out = []
    for commit in found:
        for path in commit.files:
            rows = commit.rows if len(commit.files) == 1 else None
            why = "absent" if not lake.exists(path) else file_problem(lake, path, commit.checksums.get(path), rows)
            if why:
                out.append((lake.show(path), why))
    return out


def _naming(bad: list[tuple[str, str]]) -> str:
    path, why = bad[0]
    more = f" and {len(bad) - 1} more file(s)" if len(bad) > 1 else ""
    return (
        f"{path} {why}{more}: run `aitp lake check --repair` to quarantine it, then `aitp run --resume` to regenerate"
    )


def explain_read_error(home: str | Path | Lake | None, exc: Exception) -> str | None:
    """A read error's message naming the committed file at fault and the fix, or None when every file checks out."""
    lake = as_lake(home)
    bad = bad_files(lake, [c for table in TABLES for c in commits(lake, table)])
    if not bad:
        return None
    first = " ".join(str(exc).split("\n")[0].split())
    return f"{first}; cannot read {_naming(bad)}"


def connect(home: str | Path | Lake | None = None, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per lake table and the curated views.

    read_only: DuckDB may then open only the committed files, and its configuration is locked
    (no file writes, ATTACH, INSTALL/LOAD or SET), as `aitp sql` needs.
    """
    lake = as_lake(home)
    con = duckdb.connect(":memory:")
    spec_fs = lake.duckdb_filesystem()
    if spec_fs is not None:
        con.register_filesystem(spec_fs)
    allowed: list[str] = []
    for table in TABLES:
        found = commits(lake, table)
        files = [p for c in found for p in c.files]
        allowed += [lake.duckdb_path(p) for p in files]
        try:
            con.execute(f"CREATE VIEW {_ident(table)} AS {table_view_sql(lake, table, files)}")
        except duckdb.Error as exc:  # DuckDB reads the files' footers to bind the view
            # one bad table must not stop queries on the others: its view raises, naming the file
            bad = bad_files(lake, found)
            first = " ".join(str(exc).splitlines()[0].split())
            why = _naming(bad) if bad else f"{first}: run `aitp lake check --repair` to quarantine bad files"
            con.execute(f"CREATE VIEW {_ident(table)} AS {unreadable_view_sql(table, f'table {table!r}: {why}')}")
    for name, sql in CURATED_VIEWS.items():
        con.execute(f"CREATE VIEW {_ident(name)} AS {sql}")
    if read_only:
        con.execute("SET allowed_paths = $1", [allowed])
        con.execute("SET enable_external_access = false")
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET lock_configuration = true")
    return con


def describe(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(name, 'table' or 'view', [(column, type)]) of every lake table and curated view."""
    rows = con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = 'main' ORDER BY table_name, ordinal_position"
    ).fetchall()
    columns: dict[str, list[tuple[str, str]]] = {}
    for name, column, type_ in rows:
        columns.setdefault(name, []).append((column, type_))
    order = list(TABLES) + list(CURATED_VIEWS)
    return [(n, "table" if n in TABLES else "view", columns.get(n, [])) for n in order if n in columns]
