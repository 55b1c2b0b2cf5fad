"""One proof search from the lake as a self-contained HTML page that replays it step by step.

The page needs nothing but the file: the trace is embedded as JSON and drawn with inline SVG and
JavaScript. Goals are laid out by depth, each under the goal whose tactic created it (a tidy
tree over creation; a tactic that reaches an older goal draws an extra line). A goal is shown
from the step its creating tactic ran, marked expanded from its `expanded_at_step`, and proved
from the step its first proof was complete, so the slider replays the search in order.
"""

from __future__ import annotations

import difflib
import heapq
import html
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from aitp.errors import AitpError
from aitp.viz.proof_page import PAGE

DX, DY, MARGIN = 40, 84, 40
LIVE = ("proved", "success", "no_progress")  # outcomes whose tactic ran and left goals (or none)


class UnknownTraceError(AitpError):
    """No proof-search trace in the lake matches the experiment, theorem or search id asked for."""


@dataclass
class ProofTrace:
    """The rows of one proof search: its goals, its tactic edges and the proof found, if any."""

    experiment: str
    theorem_id: str
    search_id: str
    nodes: list[dict]
    edges: list[dict]
    proof: dict | None


def _read(home: str | Path | None, table: str, experiment: str) -> pa.Table:
    from aitp.lake import experiments, read_partition
    from aitp.lake.errors import UnknownPartitionError

    try:
        return read_partition(home, table, experiment)
    except UnknownPartitionError:
        if table != "proof_nodes":
            from aitp.lake import schema_of

            return schema_of(table).empty_table()
        known = experiments(home, "proof_nodes")
        close = difflib.get_close_matches(experiment, known, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else f"known: {', '.join(known) or 'none'}; "
        raise UnknownTraceError(
            f"no proof traces for experiment '{experiment}': {hint}"
            f"write some with `aitp prove --experiment {experiment} --name THEOREM`"
        ) from None


def _matches(theorem: str, theorem_id: str) -> bool:
    name = theorem_id.split(":", 1)[-1]
    return theorem in (theorem_id, name) or name.endswith("." + theorem)


def load_trace(home: str | Path | None, experiment: str, theorem: str, search_id: str | None = None) -> ProofTrace:
    """The trace of one search of `theorem` (a theorem id, a name or its last component)."""
    nodes = _read(home, "proof_nodes", experiment)
    theorem_ids = sorted(set(nodes.column("theorem_id").to_pylist()))
    matched = [t for t in theorem_ids if _matches(theorem, t)]
    if not matched:
        by_form = {form: t for t in theorem_ids for form in (t, t.split(":", 1)[-1], t.rsplit(".", 1)[-1])}
        close = dict.fromkeys(by_form[m] for m in difflib.get_close_matches(theorem, list(by_form), n=3, cutoff=0.6))
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UnknownTraceError(
            f"no traces of theorem '{theorem}' in experiment '{experiment}': {hint}"
            f"write them with `aitp prove --experiment {experiment} --name {theorem}`"
        )
    if len(matched) > 1:
        raise UnknownTraceError(f"theorem '{theorem}' is ambiguous: pass one of {', '.join(matched)}")
    theorem_id = matched[0]
    mine = nodes.filter(pc.equal(nodes.column("theorem_id"), theorem_id))
    keys = mine.select(["search_id", "search", "iteration"]).to_pylist()
    searches = sorted({(r["search_id"], r["search"] or "?", r["iteration"]) for r in keys})
    listed = ", ".join(f"{s} ({alg}, iteration {it})" for s, alg, it in searches)
    if search_id is None and len(searches) > 1:
        raise UnknownTraceError(f"theorem '{theorem_id}' has several searches: pass --search-id, one of {listed}")
    search_id = search_id or searches[0][0]
    if search_id not in {s for s, _, _ in searches}:
        raise UnknownTraceError(f"no search '{search_id}' of theorem '{theorem_id}': use one of {listed}")

    def rows(table: pa.Table) -> list[dict]:
        return table.filter(pc.equal(table.column("search_id"), search_id)).to_pylist()

    edges, proofs = rows(_read(home, "proof_edges", experiment)), rows(_read(home, "proofs", experiment))
    return ProofTrace(experiment, theorem_id, search_id, rows(mine), edges, proofs[0] if proofs else None)


def _proved_at(nodes: list[dict], edges: list[dict]) -> dict[str, int]:
    """Step after which each goal was proved: Knuth's least fixed point over hyperedges (cost = max)."""
    done: dict[str, int] = {}
    waiting: dict[int, int] = {}
    users: dict[str, list[int]] = {}
    heap: list[tuple[int, str]] = []
    for i, edge in enumerate(edges):
        if edge["outcome"] not in LIVE:
            continue
        children = set(edge["child_node_ids"] or [])
        waiting[i] = len(children)
        for child in children:
            users.setdefault(child, []).append(i)
        if not children:
            heapq.heappush(heap, (edge["step"] or 0, edge["src_node_id"]))
    while heap:
        step, node = heapq.heappop(heap)
        if node in done:
            continue
        done[node] = step
        for i in users.get(node, []):
            waiting[i] -= 1
            if waiting[i] == 0:
                edge = edges[i]
                cost = max([edge["step"] or 0] + [done[c] for c in edge["child_node_ids"]])
                heapq.heappush(heap, (cost, edge["src_node_id"]))
    return done


def layout(trace: ProofTrace) -> dict[str, tuple[float, float]]:
    """(x, y) of every goal: y by depth, x by a tidy tree over the goal that created it."""
    ids = {n["node_id"] for n in trace.nodes}
    root = next((n["node_id"] for n in trace.nodes if n["is_root"] or n["parent_node_id"] is None), None)
    kids: dict[str, list[str]] = {i: [] for i in ids}
    for node in trace.nodes:  # rows are in creation order
        parent = node["parent_node_id"]
        if node["node_id"] != root:
            kids[parent if parent in ids else root].append(node["node_id"])
    pos: dict[str, tuple[float, float]] = {}
    next_slot = 0
    stack: list[tuple[str, int, bool]] = [(root, 0, False)] if root else []
    while stack:  # post-order without recursion: deep searches would overflow Python's stack
        nid, depth, visited = stack.pop()
        if visited or not kids[nid]:
            if kids[nid]:
                xs = [pos[k][0] for k in kids[nid]]
                x = (xs[0] + xs[-1]) / 2
            else:
                x, next_slot = MARGIN + next_slot * DX, next_slot + 1
            pos[nid] = (x, MARGIN + depth * DY)
            continue
        stack.append((nid, depth, True))
        stack.extend((k, depth + 1, False) for k in reversed(kids[nid]))
    return pos


def page_data(trace: ProofTrace) -> dict:
    """What the page draws: positioned goals, edges with their junction points, the step count."""
    pos = layout(trace)
    proved_at, created_at = _proved_at(trace.nodes, trace.edges), _created_at(trace.edges)
    first = trace.nodes[0] if trace.nodes else {}
    width = max([x for x, _ in pos.values()] + [0]) + MARGIN
    height = max([y for _, y in pos.values()] + [0]) + MARGIN + DY / 2
    return {
        "experiment": trace.experiment,
        "theorem": trace.theorem_id,
        "search_id": trace.search_id,
        "search": first.get("search"),
        "backend": first.get("backend"),
        "iteration": first.get("iteration"),
        "proved": trace.proof is not None,
        "verified": bool(trace.proof and trace.proof.get("verified")),
        "proof_text": (trace.proof or {}).get("proof_text") or "",
        "steps": _step_count(trace),
        "width": width,
        "height": height,
        "nodes": [_goal(n, pos, created_at, proved_at) for n in trace.nodes],
        "edges": [_tactic(e, pos) for e in trace.edges],
    }


def _created_at(edges: list[dict]) -> dict[str, int]:
    """Step at which each goal appeared: the earliest step of a tactic that produced it."""
    created: dict[str, int] = {}
    for edge in edges:
        for child in edge["child_node_ids"] or []:
            created[child] = min(created.get(child, edge["step"] or 0), edge["step"] or 0)
    return created


def _step_count(trace: ProofTrace) -> int:
    """Steps the slider replays: one past the last expansion or tactic step (0 for an empty search)."""
    steps = [n["expanded_at_step"] for n in trace.nodes if n["expanded_at_step"] is not None]
    steps += [e["step"] for e in trace.edges if e["step"] is not None]
    return max(steps) + 1 if steps else 0


def _goal(
    node: dict, pos: dict[str, tuple[float, float]], created_at: dict[str, int], proved_at: dict[str, int]
) -> dict:
    """One goal as the page draws it: where, what, and the steps it appears, is expanded and is proved at."""
    return {
        "id": node["node_id"],
        "x": pos[node["node_id"]][0],
        "y": pos[node["node_id"]][1],
        "goal": node["goal"],
        "status": node["status"],
        "depth": node["depth"],
        "visits": node["visits"],
        "critic": node["critic_value"],
        "logprob": node["cumulative_logprob"],
        "expanded_at": node["expanded_at_step"],
        "created_at": -1 if node["is_root"] else created_at.get(node["node_id"], -1),
        "proved_at": proved_at.get(node["node_id"]),
        "in_proof": bool(node["in_proof"]),
        "is_root": bool(node["is_root"]),
    }


def _tactic(edge: dict, pos: dict[str, tuple[float, float]]) -> dict:
    """One tactic as the page draws it: a junction half a row below its goal, over the goals it left."""
    children = [c for c in edge["child_node_ids"] or [] if c in pos]
    sx, sy = pos[edge["src_node_id"]]
    return {
        "id": edge["edge_id"],
        "src": edge["src_node_id"],
        "children": children,
        "tactic": edge["tactic"],
        "outcome": edge["outcome"],
        "error": edge["error"],
        "step": edge["step"] or 0,
        "latency": edge["latency_s"],
        "logprob": edge["tactic_logprob"],
        "in_proof": bool(edge["in_proof"]),
        "jx": (sx + sum(pos[c][0] for c in children)) / (1 + len(children)),
        "jy": sy + DY / 2,
    }


def render_html(trace: ProofTrace) -> str:
    """The page: the PAGE template with the trace's data embedded as JSON."""
    # "<" only occurs inside JSON strings, where \u003c is the same text: no "</script>" can close the tag.
    data = json.dumps(page_data(trace), ensure_ascii=False, default=str).replace("<", "\\u003c")
    head, tail = PAGE.split("__DATA__")
    return head.replace("__TITLE__", html.escape(f"{trace.theorem_id} · {trace.search_id}")) + data + tail


def write_proof_page(
    home: str | Path | None, experiment: str, theorem: str, out: Path | None = None, search_id: str | None = None
) -> tuple[Path, ProofTrace]:
    """Render one search to `out` (default proof-<theorem>-<search id>.html), written atomically."""
    trace = load_trace(home, experiment, theorem, search_id)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in trace.theorem_id.split(":", 1)[-1])
    path = Path(out) if out is not None else Path(f"proof-{safe}-{trace.search_id}.html")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_html(trace), encoding="utf-8")
    tmp.replace(path)
    return path, trace
