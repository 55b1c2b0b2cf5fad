"""The proving part of the HTML report: per-iteration proof-search figures, and each proof linked to its replay page.

Figures come from the lake's `proof_search` view (one row per iteration and split). Replay pages
(`aitp.viz.proof`) are written beside the report, in `<report stem>-proofs/`, at most `MAX_PAGES`
of them, newest iteration first; proofs beyond that are listed without a page.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

import duckdb

from aitp.report.cells import table as _table

MAX_PAGES = 60
COLUMNS = (
    *("iteration", "split", "searched", "proved", "proof rate (95 %)", "new", "retained", "proved to date"),
    *("mean proof length", "valid-tactic rate", "expansions / proof", "prover s / proof"),
)


def _num(value: Any, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _figures(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            str(r["iteration"]),
            escape(str(r["split"])),
            str(r["n_searched"]),
            str(r["n_proved"]),
            f"{_num(r['proof_rate'], 3)} <small>({_num(r['ci95_low'], 3)}–{_num(r['ci95_high'], 3)})</small>",
            str(r["n_new"]),
            str(r["n_retained"]),
            str(r["n_proved_to_date"]),
            _num(r["mean_proof_length"]),
            _num(r["valid_tactic_rate"], 3),
            _num(r["expansions_per_proof"], 1),
            _num(r["prover_seconds_per_proof"]),
        ]
        for r in rows
    ]


def _dicts(con: duckdb.DuckDBPyConnection, sql: str, experiment: str) -> list[dict[str, Any]]:
    cur = con.execute(sql, [experiment])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def read_proof_search(con: duckdb.DuckDBPyConnection, experiment: str) -> dict[str, list[dict[str, Any]]]:
    """The experiment's `proof_search` rows and its re-checked proofs (newest first); empty when it searched none."""
    figures = _dicts(con, "SELECT * FROM proof_search WHERE experiment = ? ORDER BY iteration, split", experiment)
    proofs = _dicts(
        con,
        "SELECT iteration, split, theorem_id, search_id, n_steps, proof_text FROM proofs"
        " WHERE experiment = ? AND verified ORDER BY iteration DESC, split, theorem_id",
        experiment,
    )
    return {"figures": figures, "proofs": proofs}


def proof_section(home: Any, experiment: str, found: dict[str, list[dict[str, Any]]], report: Path) -> str:
    """The report's proof-search section; writes the replay pages it links next to `report`."""
    from aitp.viz.proof import write_proof_page

    if not found["figures"]:
        return ""
    figures = _table(list(COLUMNS), _figures(found["figures"]), numeric=set(range(2, 12)) - {4})
    pages = report.parent / f"{report.stem}-proofs"
    items = []
    for i, p in enumerate(found["proofs"]):
        where = f"iteration {p['iteration']}, {escape(str(p['split']))}, {p['n_steps']} steps"
        label = f"{escape(p['theorem_id'])} <small>{where}</small>"
        if i < MAX_PAGES:
            out = pages / f"{p['split']}-{p['iteration']:03d}-{p['search_id']}.html"
            write_proof_page(home, experiment, p["theorem_id"], out, p["search_id"])
            label = f'<a href="{escape(pages.name)}/{escape(out.name)}">{label}</a>'
        items.append(f"<li>{label}<pre>{escape(p['proof_text'] or '')}</pre></li>")
    more = f" (replay pages for the newest {MAX_PAGES})" if len(items) > MAX_PAGES else ""
    return (
        "<h2>Proof search</h2>"
        "<p>Per iteration and split (valid: the iteration's evaluation of its challenger; train: the exploring search "
        "of its slice). New: first proved in this iteration; retained: proved before too.</p>"
        f"{figures}<h3>Re-checked proofs{more}</h3><ul>{''.join(items)}</ul>"
    )
