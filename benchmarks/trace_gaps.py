"""When a training step's GPU compute stands still, and why: from a Chrome trace of `train.py --trace`.

    python benchmarks/trace_gaps.py TRACE.json [--steps 2] [--top 12]

Kernel time by kind (`train_profile.py`) says how much of a step the GPU spends on what, not whether the
collectives of ZeRO-3 across GPUs overlap the compute or hold it up: NCCL's kernels run on their own streams
and count their waiting for the other GPU as running. This reads the trace's kernels and host calls and splits
the time in which no compute kernel runs (no kernel but NCCL's, on any stream) into stalls where

- the next compute kernel was launched after the stall began: the GPU waited on the host (what the host was in
  then is listed by its outermost operators, and its synchronizing calls);
- it had been launched before: the GPU waited on a dependency, a stream waiting for a collective (which ones
  ran meanwhile is listed).

Needs only the standard library: a trace can be read on any machine.
"""

from __future__ import annotations

import argparse
import bisect
import json
from collections import defaultdict
from dataclasses import dataclass

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
COLLECTIVES = ("AllGather", "ReduceScatter", "AllReduce", "Broadcast", "SendRecv")


@dataclass(frozen=True)
class Span:
    start: float  # microseconds
    end: float
    name: str
    correlation: int | None = None

    @property
    def length(self) -> float:
        return self.end - self.start


def collective(kernel: str) -> str:
    """The collective a NCCL kernel belongs to, from its name."""
    return next((c for c in COLLECTIVES if c.lower() in kernel.lower()), "other NCCL")


def merged(spans: list[Span]) -> list[tuple[float, float]]:
    """The union of spans as sorted, disjoint intervals."""
    out: list[list[float]] = []
    for s in sorted(spans, key=lambda s: s.start):
        if out and s.start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], s.end)
        else:
            out.append([s.start, s.end])
    return [(a, b) for a, b in out]


def overlap(a: float, b: float, spans: list[Span]) -> float:
    return sum(max(0.0, min(b, s.end) - max(a, s.start)) for s in spans if s.end > a and s.start < b)


def outermost(spans: list[Span]) -> list[Span]:
    """Host operators not inside another of the same thread (the trace nests them)."""
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.start, -s.end)):
        if not out or s.start >= out[-1].end:
            out.append(s)
    return out


def read(path: str) -> tuple[list[Span], list[Span], dict[int, Span], list[Span], list[Span]]:
    """(compute kernels, NCCL kernels, launch call by correlation id, each host thread's outermost operators,
    synchronizing host calls) of a Chrome trace written by torch's profiler."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    compute, nccl, launches, syncs = [], [], {}, []
    operators: dict[object, list[Span]] = defaultdict(list)
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        args = e.get("args") or {}
        span = Span(float(e["ts"]), float(e["ts"]) + float(e["dur"]), e.get("name", ""), args.get("correlation"))
        category = e.get("cat", "")
        if category in GPU_CATEGORIES:
            (nccl if "nccl" in span.name.lower() else compute).append(span)
        elif category in ("cuda_runtime", "cuda_driver"):
            if span.correlation is not None:
                launches[span.correlation] = span
            if "Synchronize" in span.name:
                syncs.append(span)
        elif category == "cpu_op":
            operators[e.get("tid")].append(span)
    host = [span for spans in operators.values() for span in outermost(spans)]  # the main and autograd's threads
    return compute, nccl, launches, host, syncs


def analyse(path: str, steps: int, top: int) -> str:
    """The report, as markdown."""
    compute, nccl, launches, host, syncs = read(path)
    if not compute:
        raise SystemExit(f"{path}: no GPU kernels in the trace: record it with train.py --trace")
    busy = merged(compute)
    ordered = sorted(compute, key=lambda s: s.start)
    starts = [s.start for s in ordered]
    window = busy[-1][1] - busy[0][0]
    stalls = []
    for (_, a), (b, _) in zip(busy, busy[1:]):
        following = ordered[bisect.bisect_left(starts, b)]
        launch = launches.get(following.correlation)
        by_host = launch is not None and launch.start > a
        stalls.append((a, b, by_host, following))
    lines = [
        f"`{path}`: {window / 1e3:.1f} ms from the first compute kernel to the last, {steps} step(s); per step:",
        "",
        "| | ms a step |",
        "|---|---:|",
        f"| wall (first to last compute kernel) | {window / 1e3 / steps:.1f} |",
        f"| compute kernels running (any stream) | {sum(b - a for a, b in busy) / 1e3 / steps:.1f} |",
        f"| NCCL kernels running (their sum) | {sum(s.length for s in nccl) / 1e3 / steps:.1f} |",
    ]
    for cause in (True, False):
        chosen = [(a, b) for a, b, by_host, _ in stalls if by_host is cause]
        label = "compute stalled, next kernel launched late (host)" if cause else "compute stalled on a dependency"
        lines.append(f"| {label} | {sum(b - a for a, b in chosen) / 1e3 / steps:.1f} |")
        per_collective: dict[str, float] = defaultdict(float)
        for a, b in chosen:
            for kind in COLLECTIVES + ("other NCCL",):
                per_collective[kind] += overlap(a, b, [s for s in nccl if collective(s.name) == kind])
        for kind, us in sorted(per_collective.items(), key=lambda kv: -kv[1]):
            if us > 0:
                lines.append(f"| ... of which {kind} running | {us / 1e3 / steps:.1f} |")
        waited = sum(overlap(a, b, syncs) for a, b in chosen)
        lines.append(f"| ... of which the host in a synchronize call | {waited / 1e3 / steps:.1f} |")
    host_sync: dict[str, list[float]] = defaultdict(list)
    for s in syncs:
        if busy[0][0] <= s.start <= busy[-1][1]:
            host_sync[s.name].append(s.length)
    lines += [
        "",
        "Host calls that wait for the GPU, in the window:",
        "",
        "| call | count | ms a step |",
        "|---|---:|---:|",
    ]
    for name, lengths in sorted(host_sync.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"| {name} | {len(lengths)} | {sum(lengths) / 1e3 / steps:.1f} |")
    host_in_stalls: dict[str, float] = defaultdict(float)
    for a, b, by_host, _ in stalls:
        if by_host:
            for s in host:
                if s.end > a and s.start < b:
                    host_in_stalls[s.name] += min(b, s.end) - max(a, s.start)
    lines += [
        "",
        "The host's outermost operators during stalls it caused:",
        "",
        "| operator | ms a step |",
        "|---|---:|",
    ]
    for name, us in sorted(host_in_stalls.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"| {name[:90]} | {us / 1e3 / steps:.1f} |")
    lines += [
        "",
        f"The {top} longest stalls:",
        "",
        "| at (ms) | ms | cause | NCCL running | next kernel |",
        "|---:|---:|---|---|---|",
    ]
    for a, b, by_host, following in sorted(stalls, key=lambda s: s[0] - s[1])[:top]:
        running = sorted({collective(s.name) for s in nccl if s.end > a and s.start < b})
        lines.append(
            f"| {(a - busy[0][0]) / 1e3:.1f} | {(b - a) / 1e3:.2f} | {'host' if by_host else 'dependency'} | "
            f"{', '.join(running) or '-'} | {following.name[:60]} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="a Chrome trace of train.py --trace")
    parser.add_argument("--steps", type=int, default=1, help="steps the trace holds (the timed ones)")
    parser.add_argument("--top", type=int, default=12, help="longest stalls and host operators listed")
    args = parser.parse_args()
    print(analyse(args.trace, args.steps, args.top))


if __name__ == "__main__":
    main()
