"""ATen's CPU kernels are pinned to AVX2 when aitp is imported, unless the environment already chose."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aitp.cpu_kernels import VARIABLE, has_avx2

PROBE = "import aitp, torch; print(torch.backends.cpu.get_cpu_capability())"


def capability(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != VARIABLE} | env
    done = subprocess.run([sys.executable, "-c", PROBE], env=clean, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_the_avx2_flag_is_read_from_cpuinfo():
    assert has_avx2("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    assert not has_avx2("flags\t\t: fpu sse2 avx fma avx2_like\n") and not has_avx2("model name\t: avx2 box\n")


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads /proc/cpuinfo")
def test_importing_aitp_pins_avx2_kernels_where_the_cpu_has_them_and_keeps_a_value_already_set():
    if not has_avx2(Path("/proc/cpuinfo").read_text()):
        pytest.skip("this CPU has no AVX2: ATen chooses")
    assert capability() == "AVX2"
    assert capability(**{VARIABLE: "default"}) == "DEFAULT"  # the user's choice stands
