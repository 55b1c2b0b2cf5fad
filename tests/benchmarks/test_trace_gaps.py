"""The trace reader of the training benchmark tells a stall the host caused from one a collective caused.

The trace is written by hand in the format of torch's profiler (Chrome trace events): a GPU to profile a
collective across two GPUs is not on the CPU machine the suite runs on."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("trace_gaps", REPO / "benchmarks" / "trace_gaps.py")
trace_gaps = sys.modules.setdefault("trace_gaps", importlib.util.module_from_spec(spec))  # dataclasses look it up
spec.loader.exec_module(trace_gaps)


def kernel(name, ts, dur, correlation, stream=7):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "ts": ts,
        "dur": dur,
        "args": {"stream": stream, "correlation": correlation},
    }


def launch(ts, correlation, name="cudaLaunchKernel", dur=5):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "ts": ts, "dur": dur, "args": {"correlation": correlation}}


def test_a_late_launch_is_the_host_s_stall_and_an_early_one_a_dependency(tmp_path):
    events = [
        # matmul 0..1000; a gap 1000..1500 with the next kernel launched at 1200 (host late), an operator then
        kernel("sm90_gemm", 0, 1000, 1),
        launch(0, 1),
        {"ph": "X", "cat": "cpu_op", "name": "zero3::fetch", "ts": 1000, "dur": 210, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 1050, "dur": 20, "tid": 1},  # nested: not outermost
        {"ph": "X", "cat": "cpu_op", "name": "autograd::hook", "ts": 1300, "dur": 100, "tid": 2},  # autograd's thread
        launch(1200, 2),
        kernel("triton_poi_fused", 1500, 500, 2),
        # a gap 2000..2800 with the next kernel launched at 1600 (before): waiting on an all-gather
        launch(1600, 3),
        kernel("ncclDevKernel_AllGather_RING_LL", 1900, 900, 4, stream=20),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventSynchronize", "ts": 2100, "dur": 600, "args": {}},
        kernel("sm90_gemm", 2800, 200, 3),
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))

    report = trace_gaps.analyse(str(path), steps=1, top=5)

    cells = [[c.strip() for c in line.strip("|").split("|")] for line in report.splitlines() if line.startswith("|")]
    rows = {c[0]: c[1] for c in cells if len(c) == 2}
    assert rows["wall (first to last compute kernel)"] == "3.0"
    assert rows["compute kernels running (any stream)"] == "1.7"
    assert rows["compute stalled, next kernel launched late (host)"] == "0.5"
    assert rows["compute stalled on a dependency"] == "0.8"
    assert rows["... of which AllGather running"] == "0.8"
    assert "| zero3::fetch | 0.2 |" in report  # the outermost operator in the host's stall, not the nested copy
    assert "aten::copy_" not in report
    assert "| autograd::hook | 0.1 |" in report
    assert "| cudaEventSynchronize | 1 | 0.6 |" in report
