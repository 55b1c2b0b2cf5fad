"""Where the provers are: the system's, or a prefix of Debian packages unpacked by an offline install.

A GPU machine often has no Coq and no package index, so `scripts/setup.sh --wheelhouse` unpacks the
Debian packages of Coq, CoqHammer and its ATPs (`dpkg -x`) into `.provers/` in the checkout instead of
installing them. Unpacked binaries keep Debian's paths compiled in and its libraries out of the loader's
reach, so every prover process the project starts takes its binary and environment from here: the
prefix's `bin` folders first on PATH (coqidetop starts CoqHammer's `eprover` from there), its libraries on
LD_LIBRARY_PATH, COQLIB at its Coq library, and OCAMLLIB and OCAMLPATH at its OCaml library (Coq's findlib
resolves plugins such as CoqHammer's there). Without a prefix the system's provers are used unchanged.

Either way `atp_names/` beside this file comes first on PATH: it holds the names CoqHammer 1.3.2 calls its ATPs by
where Debian ships them under others (`cvc4` runs Debian's cvc5), so `hammer` runs every ATP that is installed.

`python -m aitp.proving.coq.prefix` prints where each prover is found.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PREFIX_ENV = "AITP_PROVERS"
DEFAULT_PREFIX = Path(__file__).resolve().parents[3] / ".provers"
# Debian 12's Coq 8.16 keeps its library under the OCaml tree; older releases under /usr/lib/coq.
COQLIB_CANDIDATES = ("usr/lib/ocaml/coq", "usr/lib/coq")
PROVER_BINARIES = ("coqidetop.opt", "coqc", "eprover", "z3", "cvc5", "cvc4")
ATP_NAMES = Path(__file__).resolve().parent / "atp_names"


def prover_prefix() -> Path | None:
    """The unpacked prover prefix ($AITP_PROVERS, else `.provers` in the checkout), if there is one."""
    configured = os.environ.get(PREFIX_ENV)
    prefix = Path(configured).resolve() if configured else DEFAULT_PREFIX
    return prefix if (prefix / "usr" / "bin").is_dir() else None


def _prepend(paths: list[Path], current: str | None) -> str:
    return os.pathsep.join([*(str(p) for p in paths), *([current] if current else [])])


def prover_env() -> dict[str, str]:
    """The environment for a prover process: CoqHammer's ATP names, then the prefix's paths, first."""
    env = dict(os.environ)
    prefix = prover_prefix()
    if prefix is None:
        env["PATH"] = _prepend([ATP_NAMES], env.get("PATH"))
        return env
    env["PATH"] = _prepend([ATP_NAMES, prefix / "usr" / "bin", prefix / "bin"], env.get("PATH"))
    libraries = sorted(prefix.glob("usr/lib/*-linux-gnu")) + sorted(prefix.glob("lib/*-linux-gnu"))
    env["LD_LIBRARY_PATH"] = _prepend(libraries, env.get("LD_LIBRARY_PATH"))
    coqlib = next((prefix / c for c in COQLIB_CANDIDATES if (prefix / c / "theories").is_dir()), None)
    if coqlib is not None:
        env["COQLIB"] = str(coqlib)
    ocaml = prefix / "usr" / "lib" / "ocaml"
    if ocaml.is_dir():
        env["OCAMLLIB"] = env["OCAMLPATH"] = str(ocaml)
        # Findlib refuses to start without a configuration file, and Debian's (/etc/ocamlfind.conf) comes with
        # the OCaml compiler's packages, which are not carried: an empty one is enough, the paths are set above.
        env["OCAMLFIND_CONF"] = os.devnull
    return env


def prover_binary(*names: str) -> str | None:
    """The first of `names` found on the provers' PATH (the prefix's folders first), or None."""
    path = prover_env()["PATH"]
    for name in names:
        found = shutil.which(name, path=path)
        if found:
            return found
    return None


CHECK = "Require Import Lia.\nGoal 1 + 1 = 2. Proof. lia. Qed.\n"  # Coq starts, loads a plugin, proves


def main() -> int:
    """Print where each prover is found and what `coqc -where` answers; non-zero if Coq cannot prove a lemma."""
    prefix = prover_prefix()
    print(f"prefix: {prefix or f'none ({DEFAULT_PREFIX} or ${PREFIX_ENV}): the system provers'}")
    for name in PROVER_BINARIES:
        print(f"{name}: {prover_binary(name) or 'not found'}")
    coqc = prover_binary("coqc")
    if coqc is None:
        return 0 if prefix is None else 1
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "check.v").write_text(CHECK)
        done = subprocess.run([coqc, "check.v"], capture_output=True, text=True, env=prover_env(), cwd=scratch)
    if done.returncode == 0:
        done = subprocess.run([coqc, "-where"], capture_output=True, text=True, env=prover_env())
    if done.returncode != 0:
        why = " ".join(done.stderr.split())[:300] or f"status {done.returncode}"
        fix = (
            "build the wheelhouse on a Debian/Ubuntu no newer than this machine (its glibc is older)"
            if "GLIBC" in why
            else "remove the prefix and install Coq from a package mirror (scripts/install_provers.sh)"
        )
        print(f"error: {coqc} does not run here ({why}): {fix}", file=sys.stderr)
        return 1
    print(f"coqc -where: {done.stdout.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
