"""The HTML/CSS/JS of the proof-search viewer: one page, no network, data in a JSON script tag.

`__TITLE__` and `__DATA__` are filled by `aitp.viz.proof.render_html`. The script draws every goal
and edge once, then shows, hides and colours them for the step the slider is on.
"""

PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>__TITLE__</title>
<style>
  body { margin: 0; font: 14px system-ui, sans-serif; color: #222; display: flex; height: 100vh; }
  #main { flex: 1; display: flex; flex-direction: column; min-width: 0; }
  header { padding: 8px 12px; border-bottom: 1px solid #ddd; }
  header h1 { font-size: 16px; margin: 0 0 4px; word-break: break-all; }
  .meta { color: #555; font-size: 12px; }
  #controls { padding: 6px 12px; display: flex; gap: 8px; align-items: center; border-bottom: 1px solid #ddd; }
  #step { flex: 1; }
  #canvas { flex: 1; overflow: auto; background: #fafafa; }
  aside { width: 380px; border-left: 1px solid #ddd; padding: 8px 12px; overflow: auto; }
  pre { white-space: pre-wrap; word-break: break-word; background: #f3f3f3; padding: 6px; margin: 4px 0; }
  .node circle { fill: #bbb; stroke: #666; stroke-width: 1; cursor: pointer; }
  .node.expanded circle { fill: #7aa7e0; }
  .node.proved circle { fill: #4caf50; }
  .node.failed circle { fill: #e57373; }
  .node.current circle { stroke: #ff9800; stroke-width: 3; }
  .node.selected circle { stroke: #000; stroke-width: 3; }
  .node.in-proof circle { stroke: #1b5e20; stroke-width: 2.5; }
  .edge line { stroke: #aaa; stroke-width: 1; }
  .edge.in-proof line { stroke: #2e7d32; stroke-width: 3; }
  .edge text { font: 10px monospace; fill: #444; }
  .edge.in-proof text { fill: #1b5e20; font-weight: bold; }
  .qed { fill: #4caf50; }
  .hidden { display: none; }
  table { border-collapse: collapse; font-size: 12px; width: 100%; }
  td { border-top: 1px solid #eee; padding: 2px 4px; vertical-align: top; }
  td.tac { font-family: monospace; word-break: break-all; }
  .outcome-proved, .outcome-success { color: #2e7d32; }
  .outcome-error, .outcome-timeout { color: #c62828; }
</style>
</head>
<body>
<div id="main">
  <header>
    <h1 id="title"></h1>
    <div class="meta" id="meta"></div>
  </header>
  <div id="controls">
    <button id="first" title="first step">|&#x25C0;</button>
    <button id="prev" title="previous step">&#x25C0;</button>
    <button id="play" title="replay">&#x25B6;</button>
    <button id="next" title="next step">&#x25B6;&#x25B6;</button>
    <input type="range" id="step" min="0" value="0">
    <span id="step-label"></span>
    <span><span id="node-count">0</span> / <span id="node-total">0</span> goals</span>
  </div>
  <div id="canvas"><svg id="tree" xmlns="http://www.w3.org/2000/svg"></svg></div>
</div>
<aside>
  <h2 style="font-size:14px">Goal</h2>
  <div class="meta" id="node-meta">Click a goal in the tree.</div>
  <pre id="goal"></pre>
  <table id="tactics"></table>
  <h2 style="font-size:14px">Proof</h2>
  <pre id="proof"></pre>
</aside>
<script type="application/json" id="trace-data">__DATA__</script>
<script>
"use strict";
const T = JSON.parse(document.getElementById("trace-data").textContent);
const NS = "http://www.w3.org/2000/svg";
const svg = document.getElementById("tree");
const byId = new Map(T.nodes.map(n => [n.id, n]));
const slider = document.getElementById("step");
let selected = null, timer = null;

function el(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  parent.appendChild(e);
  return e;
}
function short(text, n) { return text.length > n ? text.slice(0, n - 1) + "\u2026" : text; }
function fmt(v, d) { return v === null || v === undefined ? "-" : Number(v).toFixed(d); }

document.getElementById("title").textContent = T.theorem;
document.getElementById("meta").textContent =
  `${T.search} on ${T.backend} \u00b7 experiment ${T.experiment}, iteration ${T.iteration}` +
  ` \u00b7 search ${T.search_id} \u00b7 ` +
  (T.proved ? (T.verified ? "proved (checked)" : "proved (not checked)") : "not proved");
document.getElementById("proof").textContent = T.proof_text || "(no proof found)";
svg.setAttribute("width", T.width);
svg.setAttribute("height", T.height);
const edgeLayer = el("g", {}, svg), nodeLayer = el("g", {}, svg);

// Tactics that took a goal to the same goals share one drawing, labelled with all of them;
// failed tactics and tactics that changed nothing are listed in the side panel only.
const groups = new Map();
for (const e of T.edges) {
  const drawn = e.outcome === "proved" || (e.children.length && !e.children.includes(e.src));
  if (!drawn) continue;
  const key = e.src + "|" + (e.outcome === "proved" ? "qed" : e.children.join(","));
  if (!groups.has(key)) groups.set(key, {first: e, edges: []});
  groups.get(key).edges.push(e);
}
for (const grp of groups.values()) {
  const e = grp.first, src = byId.get(e.src);
  const g = el("g", {class: "edge"}, edgeLayer);
  grp.g = g;
  grp.step = Math.min(...grp.edges.map(x => x.step));
  grp.in_proof = grp.edges.some(x => x.in_proof);
  const label = short(grp.edges.map(x => x.tactic).join(" | "), 28);
  if (e.outcome === "proved") {
    el("line", {x1: src.x, y1: src.y, x2: src.x, y2: src.y + 22}, g);
    el("rect", {class: "qed", x: src.x - 4, y: src.y + 22, width: 8, height: 8}, g);
    el("text", {x: src.x + 6, y: src.y + 30}, g).textContent = label;
  } else {
    const multi = e.children.length > 1;
    if (multi) el("line", {x1: src.x, y1: src.y, x2: e.jx, y2: e.jy}, g);
    for (const c of e.children) {
      const child = byId.get(c);
      el("line", {x1: multi ? e.jx : src.x, y1: multi ? e.jy : src.y, x2: child.x, y2: child.y}, g);
    }
    const first = byId.get(e.children[0]);
    const lx = multi ? e.jx : src.x + 0.55 * (first.x - src.x), ly = multi ? e.jy : src.y + 0.55 * (first.y - src.y);
    el("text", {x: lx + 3, y: ly}, g).textContent = label;
  }
  el("title", {}, g).textContent = grp.edges.map(x => `${x.tactic} \u2192 ${x.outcome} (step ${x.step})`).join("\n");
}
for (const n of T.nodes) {
  const g = el("g", {class: "node", "data-node-id": n.id, transform: `translate(${n.x},${n.y})`}, nodeLayer);
  el("circle", {r: n.is_root ? 10 : 7}, g);
  el("title", {}, g).textContent = short(n.goal, 200);
  g.addEventListener("click", () => select(n));
  n.g = g;
}

function select(n) {
  if (selected) selected.g.classList.remove("selected");
  selected = n;
  n.g.classList.add("selected");
  document.getElementById("goal").textContent = n.goal;
  document.getElementById("node-meta").textContent =
    `${n.status} \u00b7 depth ${n.depth} \u00b7 expanded at step ${n.expanded_at ?? "-"}` +
    ` \u00b7 visits ${n.visits ?? 0} \u00b7 critic ${fmt(n.critic, 3)} \u00b7 log-prob ${fmt(n.logprob, 2)}`;
  const table = document.getElementById("tactics");
  table.replaceChildren();
  const s = Number(slider.value);
  for (const e of T.edges) {
    if (e.src !== n.id || e.step >= s) continue;
    const row = table.insertRow();
    row.insertCell().textContent = e.step;
    const tac = row.insertCell();
    tac.className = "tac";
    tac.textContent = e.tactic;
    const out = row.insertCell();
    out.className = "outcome-" + e.outcome;
    out.textContent = e.outcome + (e.error ? ": " + short(e.error, 80) : "");
    row.insertCell().textContent = fmt(1000 * (e.latency ?? 0), 1) + " ms";
  }
}

function show(s) {
  slider.value = s;
  const root = T.nodes.find(n => n.is_root);
  const rootProved = Boolean(root && root.proved_at !== null && root.proved_at < s);
  let visible = 0;
  for (const n of T.nodes) {
    const on = n.is_root || n.created_at < s;
    n.g.classList.toggle("hidden", !on);
    if (!on) continue;
    visible++;
    n.g.classList.toggle("expanded", n.expanded_at !== null && n.expanded_at < s);
    n.g.classList.toggle("proved", n.proved_at !== null && n.proved_at < s);
    n.g.classList.toggle("failed", s === T.steps && n.status === "failed");
    n.g.classList.toggle("current", n.expanded_at === s - 1);
    n.g.classList.toggle("in-proof", n.in_proof && rootProved);
  }
  for (const grp of groups.values()) {
    grp.g.classList.toggle("hidden", grp.step >= s);
    grp.g.classList.toggle("in-proof", grp.in_proof && rootProved);
  }
  document.getElementById("node-count").textContent = visible;
  document.getElementById("step-label").textContent = `step ${s} / ${T.steps}`;
  if (selected) select(selected);
}

function stop() { if (timer) { clearInterval(timer); timer = null; } }
slider.max = T.steps;
slider.addEventListener("input", () => { stop(); show(Number(slider.value)); });
document.getElementById("first").onclick = () => { stop(); show(0); };
document.getElementById("prev").onclick = () => { stop(); show(Math.max(0, Number(slider.value) - 1)); };
document.getElementById("next").onclick = () => { stop(); show(Math.min(T.steps, Number(slider.value) + 1)); };
document.getElementById("play").onclick = () => {
  if (timer) return stop();
  if (Number(slider.value) >= T.steps) show(0);
  timer = setInterval(() => {
    const s = Number(slider.value) + 1;
    if (s > T.steps) return stop();
    show(s);
  }, 400);
};
document.getElementById("node-total").textContent = T.nodes.length;
show(T.steps);
document.body.dataset.rendered = "1";
</script>
</body>
</html>
"""
