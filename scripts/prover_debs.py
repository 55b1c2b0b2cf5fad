"""Debian's provers for an offline install: which packages to carry, their download, their unpack into a prefix.

A GPU machine often has neither Coq nor a package index. `scripts/wheelhouse.sh --provers coq` calls
`download` to fetch Coq, CoqHammer and the ATPs its `hammer` calls, with the libraries they link that a
minimal image lacks, as .deb files into the wheelhouse (so its manifest and bundles cover them).
`scripts/setup.sh --wheelhouse` calls `unpack` to `dpkg -x` them into `.provers/`, where apt cannot run, and
to link the one folder CoqHammer looks for at a fixed place (FIXED_PATHS) where this user may;
`aitp.proving.coq.prefix` then points the Coq backend at that prefix.

Left out (`TARGET_HAS`): the C and C++ runtime, which must be the target's own (the prefix is put on
LD_LIBRARY_PATH, and a second libc there would break every program started from it), and what Coq's
package pulls in only to compile (the OCaml compiler, python3 for coq_makefile), with what only they need.
Standard library only: `unpack` runs on the target before anything is installed.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROVERS = {"coq": ("coq", "libcoq-hammer", "eprover", "z3", "cvc5")}
TARGET_HAS = ("libc6", "libgcc-s1", "libstdc++6", "gcc-*-base", "ocaml-nox", "ocaml-findlib", "python3")
# Where Debian compiled absolute paths into the provers that no variable moves: CoqHammer runs its ATPs through
# /usr/libexec/coq-hammer/htimeout (and predicts premises with its `predict`). Linked to the prefix where allowed.
FIXED_PATHS = ("usr/libexec/coq-hammer",)
_DEPENDS = re.compile(r"^ ([ |])(?:Pre)?Depends: (\S+)$")


def parse_depends(text: str) -> dict[str, list[list[str]]]:
    """`apt-cache depends` output: per package, groups of alternatives, virtual names replaced by providers."""
    packages: dict[str, list[list[str]]] = {}
    groups: list[list[str]] = []
    alternative, virtual = False, False
    for line in text.splitlines():
        if line and not line.startswith(" "):
            groups = packages.setdefault(line.strip(), [])
        elif m := _DEPENDS.match(line):
            name = m.group(2)
            virtual = name.startswith("<")
            if not alternative:
                groups.append([])
            if not virtual:
                groups[-1].append(name.split(":")[0])
            alternative = m.group(1) == "|"
        elif line.startswith("    ") and virtual:
            groups[-1].append(line.strip().split(":")[0])
    return {name: [g for g in groups if g] for name, groups in packages.items()}


def apt_depends(packages: list[str]) -> dict[str, list[list[str]]]:
    """The hard dependencies of packages, as this machine's apt index knows them (one call: apt is slow to start)."""
    flags = ("--no-recommends", "--no-suggests", "--no-enhances", "--no-conflicts", "--no-breaks", "--no-replaces")
    done = subprocess.run(["apt-cache", "depends", *flags, *packages], capture_output=True, text=True)
    found = parse_depends(done.stdout)
    unknown = [p for p in packages if p not in found]
    if done.returncode != 0 or unknown:
        raise SystemExit(
            f"error: apt knows no package {(unknown or packages)[0]} here: run apt-get update, "
            "or build with --provers none"
        )
    return found


def closure(
    roots: tuple[str, ...],
    depends: Callable[[list[str]], dict[str, list[list[str]]]],
    skip: tuple[str, ...] = TARGET_HAS,
) -> list[str]:
    """Every package reached from `roots` by hard dependencies (first alternative), not passing `skip`."""

    def skipped(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in skip)

    carried: set[str] = set()
    level = sorted({r for r in roots if not skipped(r)})
    while level:  # breadth first, one apt call per level
        carried.update(level)
        reached = set()
        for groups in depends(level).values():
            for group in groups:
                if not any(skipped(a) or a in carried for a in group):
                    reached.add(group[0])
        level = sorted(reached - carried)
    return sorted(carried)


def download(provers: str, into: Path) -> list[str]:
    """Fetch the .deb files of `provers` (a key of PROVERS) and what they need beyond the target into `into`."""
    if provers not in PROVERS:
        raise SystemExit(f"error: unknown provers {provers}: pass one of {', '.join(PROVERS)} or none")
    if shutil.which("apt-get") is None:
        raise SystemExit("error: no apt-get here to fetch the provers: build on Debian/Ubuntu or pass --provers none")
    packages = closure(PROVERS[provers], apt_depends)
    into.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["apt-get", "download", *packages], cwd=into, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: apt-get download failed ({done.stderr.strip()[-300:]}): run apt-get update")
    return packages


def unpack(debs: Path, prefix: Path) -> int:
    """`dpkg -x` every .deb in `debs` into `prefix` (replaced whole, never left half-done); how many there were."""
    files = sorted(debs.glob("*.deb"), key=lambda p: -p.stat().st_size)  # the largest first: it takes longest
    if not files:
        return 0
    if shutil.which("dpkg-deb") is None:
        raise SystemExit(
            "error: no dpkg-deb here to unpack the provers' .deb files: unpack them on a Debian/Ubuntu machine, "
            "or build the wheelhouse with --provers none"
        )
    partial = prefix.with_name(prefix.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)

    def extract(deb: Path) -> subprocess.CompletedProcess:
        return subprocess.run(["dpkg-deb", "-x", str(deb), str(partial)], capture_output=True, text=True)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        failed = [(deb, d) for deb, d in zip(files, pool.map(extract, files)) if d.returncode != 0]
    if failed:
        shutil.rmtree(partial)
        deb, done = failed[0]
        raise SystemExit(f"error: dpkg-deb -x {deb.name} failed ({done.stderr.strip()[-200:]}): copy its bundle again")
    # Findlib counts threads.posix as present only if threads.cma is (it ships in Debian's 69 MB `ocaml`,
    # not carried); Coq's native binaries link threads in and never read it, so an empty one lets
    # CoqHammer's plugins resolve.
    threads = partial / "usr" / "lib" / "ocaml" / "threads"
    if (threads / "META").exists() and not (threads / "threads.cma").exists():
        (threads / "threads.cma").write_bytes(b"")
    (partial / "debs.txt").write_text("".join(f"{deb.name}\n" for deb in sorted(files)))
    shutil.rmtree(prefix, ignore_errors=True)
    partial.rename(prefix)
    return len(files)


def link_fixed_paths(prefix: Path, root: Path = Path("/")) -> list[str]:
    """Link each of FIXED_PATHS that `root` lacks to the prefix's copy; what could not be linked, with the fix."""
    notes = []
    for rel in FIXED_PATHS:
        target, link = (prefix / rel).resolve(), root / rel
        if not target.exists() or link.exists():  # not carried, or the system's own install
            continue
        try:
            if link.is_symlink():  # left dangling by a prefix that has moved
                link.unlink()
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target)
        except OSError:
            notes.append(f"CoqHammer's hammer needs {link}: as root, ln -s {target} {link} (sauto works without it)")
    return notes


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("download", help="fetch the provers' .deb files with what they need beyond the target")
    d.add_argument("provers", choices=sorted(PROVERS))
    d.add_argument("into", type=Path)
    u = sub.add_parser("unpack", help="dpkg -x every .deb of a folder into a prefix")
    u.add_argument("debs", type=Path)
    u.add_argument("prefix", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "download":
        packages = download(args.provers, args.into)
        print(f"{len(packages)} Debian packages for {args.provers}: {' '.join(packages)}")
    else:
        print(f"{unpack(args.debs, args.prefix)} Debian packages unpacked into {args.prefix}")
        for note in link_fixed_paths(args.prefix):
            print(f"warning: {note}")


if __name__ == "__main__":
    main(sys.argv[1:])
