"""aitp: an orchestrated eval -> filter -> train -> promote loop for verifiable reasoning and proving."""

from aitp.cpu_kernels import pin_cpu_kernels

pin_cpu_kernels()  # before any CPU kernel runs: the same numbers on AMD CPUs with and without AVX-512

__version__ = "0.1.0"
