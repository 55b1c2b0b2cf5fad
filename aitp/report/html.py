"""One self-contained HTML report of an experiment: iterations, promotions, pass rates, proofs, plot, samples.

Self-contained means one file that opens offline: inline CSS, the plot as a data URI, no scripts.
Everything from the lake is HTML-escaped: completions are model output and may hold any markup.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

import duckdb

from aitp.atomic import publish_bytes
from aitp.report.cells import table as _table
from aitp.report.cells import text as _text
from aitp.report.plots import (
    OVERALL,
    read_iterations,
    render_png,
    require_experiment,
    table_from_connection,
)

SAMPLES_PER_KIND = 2
MAX_TEXT = 1500
ITERATION_COLUMNS = (
    *("iteration", "status", "model_in", "model_out", "promoted", "reason"),
    *("eval pass rate", "champion pass rate", "kept-group rate", "flow run", "flow run id", "MLflow run id"),
)

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}
h1{margin-bottom:.2em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:12px;word-break:break-all} small{color:#777}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px} dt{font-weight:600}
ol.timeline{list-style:none;border-left:3px solid #ccc;padding-left:1em}
ol.timeline li{margin:.4em 0;position:relative}
ol.timeline li:before{content:"";position:absolute;left:-1.45em;top:.35em;width:.7em;height:.7em;border-radius:50%;
background:#bbb} ol.timeline li.promoted:before{background:#2a2}
.promoted{color:#161} .kept{color:#161} .dropped{color:#a22}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:.5em;white-space:pre-wrap;word-break:break-word;
max-height:22em;overflow:auto;font-size:12px}
img{max-width:100%;border:1px solid #eee}
"""


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def _header(experiment: str, iterations: list[dict[str, Any]], aliases: dict[str, str] | None) -> str:
    starts = [r["started_at"] for r in iterations if r["started_at"] is not None]
    ends = [r["finished_at"] for r in iterations if r["finished_at"] is not None]
    wall = (max(ends) - min(starts)).total_seconds() if starts and ends else None
    hashes = list(dict.fromkeys(r["config_hash"] for r in iterations if r["config_hash"]))
    codes = list(dict.fromkeys(r["code_version"] for r in iterations if r["code_version"]))
    facts = [
        ("config hash", ", ".join(f"<code>{_text(h)}</code>" for h in hashes) or "–"),
        ("code version", ", ".join(f"<code>{_text(c)}</code>" for c in codes) or "–"),
        ("iterations", f"{len(iterations)} ({iterations[0]['iteration']}–{iterations[-1]['iteration']})"),
        (
            "wall time",
            f"{_duration(wall)} <small>{_text(min(starts) if starts else None)} → "
            f"{_text(max(ends) if ends else None)}</small>",
        ),
        (
            "champion now",
            f"<code>{_text(iterations[-1]['champion_model'])}</code> "
            f"<small>version {_text(iterations[-1]['champion_version'])}</small>",
        ),
    ]
    if aliases:
        facts.append(("registry aliases", ", ".join(f"{_text(a)} → v{_text(v)}" for a, v in sorted(aliases.items()))))
    facts.append(("generated", _text(datetime.now(UTC))))
    items = "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in facts)
    config = next((r["config_json"] for r in reversed(iterations) if r["config_json"]), None)
    details = ""
    if config:
        try:
            config = json.dumps(json.loads(config), indent=2, sort_keys=True)
        except ValueError:
            pass
        details = f"<details><summary>resolved config (latest)</summary><pre>{escape(config)}</pre></details>"
    return f"<h1>Experiment {escape(experiment)}</h1><dl>{items}</dl>{details}"


def _iterations_section(iterations: list[dict[str, Any]]) -> str:
    rows = [
        [
            _text(r["iteration"]),
            f"{_text(r['status'])} <small>{_text(r['stage'])}</small>",
            f"<code>{_text(r['model_in'])}</code>",
            f"<code>{_text(r['model_out'])}</code>",
            f"<span class={'promoted' if r['promoted'] else 'not'}>{_text(r['promoted'])}</span>",
            _text(r["promote_reason"]),
            _text(r["eval_pass_rate"]),
            _text(r["champion_pass_rate"]),
            _text(r["kept_group_rate"]),
            _text(r["flow_run_name"]),
            f"<code>{_text(r['flow_run_id'])}</code>",
            f"<code>{_text(r['mlflow_run_id'])}</code>",
        ]
        for r in iterations
    ]
    return "<h2>Iterations</h2>" + _table(list(ITERATION_COLUMNS), rows, numeric={0, 6, 7, 8})


def _timeline_section(iterations: list[dict[str, Any]]) -> str:
    items = []
    for r in iterations:
        if r["promoted"]:
            what = f"<b>promoted</b> <code>{_text(r['model_out'])}</code> → champion v{_text(r['champion_version'])}"
        else:
            what = f"kept champion <code>{_text(r['champion_model'])}</code>"
        cls = " class=promoted" if r["promoted"] else ""
        items.append(
            f"<li{cls}>iteration {_text(r['iteration'])}: {what}<br><small>{_text(r['promote_reason'])}</small></li>"
        )
    return "<h2>Promotions</h2><ol class=timeline>" + "".join(items) + "</ol>"


def _pass_rate_section(table: list[dict[str, Any]]) -> str:
    iterations = sorted({r["iteration"] for r in table})
    tasks = list(dict.fromkeys(r["task"] for r in table))
    cells = {(r["task"], r["iteration"]): r for r in table}
    rows = []
    for task in tasks:
        row = [f"<b>{escape(task)}</b>" if task == OVERALL else escape(task)]
        for k in iterations:
            r = cells[(task, k)]
            row.append(
                f"{_text(r['champion_pass_rate'])}<br><small>challenger {_text(r['challenger_pass_rate'])}</small>"
            )
        rows.append(row)
    headers = ["task"] + [f"iter {k}" for k in iterations]
    note = "<p><small>Champion after each iteration (challenger = the iteration's model_out).</small></p>"
    return "<h2>Held-out pass rate per task</h2>" + note + _table(headers, rows, set(range(1, len(headers))))


def _sample_rollouts(con: duckdb.DuckDBPyConnection, experiment: str) -> list[dict[str, Any]]:
    """A few samples of kept and of dropped groups per task, from the latest iteration with rollouts."""
    cur = con.execute(
        """
        SELECT iteration, task, group_id, sample_index, group_kept, keep_reason, prompt, completion,
               gold_answer, extracted_answer, raw_score, final_score
        FROM rollouts
        WHERE experiment = $e AND iteration = (SELECT max(iteration) FROM rollouts WHERE experiment = $e)
        QUALIFY row_number() OVER (PARTITION BY task, group_kept ORDER BY group_id, sample_index) <= $n
        ORDER BY task, group_kept DESC NULLS LAST, group_id, sample_index
        """,
        {"e": experiment, "n": SAMPLES_PER_KIND},
    )
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _question(prompt: str | None) -> str:
    """The last user message of a JSON chat prompt (the raw text when it is not one)."""
    try:
        messages = json.loads(prompt or "")
        return next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    except (ValueError, TypeError, AttributeError, KeyError, StopIteration):
        return prompt or ""


def _clip(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"\n… ({len(text) - MAX_TEXT} more characters)"


def _samples_section(samples: list[dict[str, Any]]) -> str:
    if not samples:
        return "<h2>Sample rollouts</h2><p>No rollouts in the lake for this experiment.</p>"
    parts = [f"<h2>Sample rollouts (iteration {samples[0]['iteration']})</h2>"]
    task = None
    for s in samples:
        if s["task"] != task:
            task = s["task"]
            parts.append(f"<h3>{escape(task)}</h3>")
        kind = {True: "kept", False: "dropped"}.get(s["group_kept"], "undecided")
        parts.append(
            f"<h4><span class={kind}>{kind}</span> group <code>{_text(s['group_id'])}</code> sample "
            f"{_text(s['sample_index'])} <small>raw {_text(s['raw_score'])}, final {_text(s['final_score'])}, "
            f"answer {_text(s['extracted_answer'])} (gold {_text(s['gold_answer'])}); "
            f"{_text(s['keep_reason'])}</small></h4>"
            f"<pre>{escape(_clip(_question(s['prompt'])))}</pre><pre>{escape(_clip(s['completion']))}</pre>"
        )
    return "".join(parts)


def write_report(home: Any, experiment: str, out: Path, registry_aliases: dict[str, str] | None = None) -> Path:
    """Write the experiment's one-file HTML report to `out` (whole or not at all); return its path."""
    from aitp.lake import connect
    from aitp.report.proofs import proof_section, read_proof_search

    con = connect(home, read_only=True)
    try:
        require_experiment(con, experiment, home)
        iterations = read_iterations(con, experiment)
        table = table_from_connection(con, experiment)
        samples = _sample_rollouts(con, experiment)
        proving = read_proof_search(con, experiment)
    finally:
        con.close()
    kept = {r["iteration"]: r["kept_group_rate"] for r in table}  # filled from the rollouts where the row lacks it
    for it in iterations:
        it["kept_group_rate"] = kept.get(it["iteration"], it["kept_group_rate"])
    png = base64.b64encode(render_png(table, experiment)).decode("ascii")
    body = "".join(
        [
            _header(experiment, iterations, registry_aliases),
            _iterations_section(iterations),
            _timeline_section(iterations),
            _pass_rate_section(table),
            proof_section(home, experiment, proving, Path(out)),
            f'<h2>Plot</h2><img alt="pass rate per task over iterations" src="data:image/png;base64,{png}">',
            _samples_section(samples),
        ]
    )
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>aitp report: {escape(experiment)}'
        f"</title><style>{CSS}</style></head><body>{body}</body></html>\n"
    )
    return publish_bytes(out, page.encode("utf-8"))
