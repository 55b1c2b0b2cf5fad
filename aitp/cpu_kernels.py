"""ATen's CPU kernel family pinned to AVX2, so that the same inputs give the same numbers on AMD x86-64 machines.

ATen picks its vectorised CPU kernels by what the CPU offers: AVX-512 where present, else AVX2. The two
reduce in another order (softmax, norms, sums), and a model trained from scratch carries the difference
through every step, so the quickstart's held-out table differs between the two. Pinned, a machine with
AVX-512 gives the table of the machines without it to the last digit, and its stages run no slower
(`benchmarks/results/history-quickstart.md`). Random draws and dtype casts are the same under both, so the
GPU path, whose CPU work is mostly those, is unaffected.

On Intel CPUs with AVX-512 the numbers still differ: MKL, torch's BLAS, picks its own kernels for the matrix
products there, and neither this setting nor MKL's AVX2 setting gives the AMD machines' bits
(`benchmarks/results/history-quickstart.md`).

ATen reads `ATEN_CPU_CAPABILITY` once, at its first CPU kernel, so aitp sets it when it is imported; worker
processes inherit it. A value already set is kept (`avx512` gives the machine's own kernels back). CPUs
without AVX2, and other architectures, are left to ATen's own choice: pinning a family the CPU lacks would
stop the process at its first kernel.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

VARIABLE = "ATEN_CPU_CAPABILITY"
PINNED = "avx2"


def has_avx2(cpuinfo: str) -> bool:
    """Whether a Linux `/proc/cpuinfo` text lists the avx2 flag."""
    return any(line.startswith("flags") and "avx2" in line.partition(":")[2].split() for line in cpuinfo.splitlines())


def pin_cpu_kernels() -> str | None:
    """Set `ATEN_CPU_CAPABILITY` to avx2 where the CPU has it and nothing set it; the value in effect, if any."""
    if VARIABLE in os.environ:
        return os.environ[VARIABLE]
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    if not has_avx2(cpuinfo):
        return None
    os.environ[VARIABLE] = PINNED
    return PINNED
