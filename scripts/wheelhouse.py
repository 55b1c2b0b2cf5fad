"""The wheelhouse's format, in one place: what to carry, how it is cut into bundles, how it is put back.

`scripts/wheelhouse.sh` resolves the project for a target (pip's dry-run report), then calls
`plan` to name the wheels the target lacks, and `pack` to write the manifest and cut the
wheelhouse into bundles (and oversized files into parts). `scripts/setup.sh --wheelhouse DIR`
calls `unpack` to join parts and check every file against the manifest before pip sees it.
Standard library only: it runs on the target before anything is installed.

A package the target already has brings with it the packages only it needs (torch brings its
nvidia-* and triton); a dependency that some other carried package also needs stays in, so the
target's pip can take a newer one when the target's own is too old.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

MANIFEST = "MANIFEST.sha256"
PART = ".part-"
CHUNK = 1 << 20


def normalize(name: str) -> str:
    """A distribution name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(spec: str) -> str:
    return normalize(re.split(r"[\s\[<>=!~;(@]", spec.strip(), maxsplit=1)[0])


def _requirements(report: dict):
    """Parse Requires-Dist with packaging (pip's own copy where it is not installed)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover - pip always vendors it
        from pip._vendor.packaging.requirements import Requirement
    return Requirement


def plan(report: dict, have: list[str], project: str) -> list[str]:
    """`name==version` of every resolved package the target lacks, reached from the roots without passing `have`.

    Markers are evaluated in the target's environment (the report's), extras as they are asked for
    along the way, so an extra nobody asks for (deepspeed[sd] -> triton) brings nothing in.
    """
    requirement = _requirements(report)
    resolved = {normalize(i["metadata"]["name"]): i for i in report["install"]}
    env = dict(report.get("environment") or {})
    skip = {_requirement_name(h) for h in have if h.strip()}
    skip |= {n for n in resolved if any(n.startswith(h[:-1]) for h in skip if h.endswith("*"))}
    extras: dict[str, set[str]] = {}
    todo = [(n, set(i.get("requested_extras") or [])) for n, i in resolved.items() if i.get("requested")]
    while todo:
        name, asked = todo.pop()
        if name in skip or (name in extras and asked <= extras[name]):
            continue
        extras.setdefault(name, set()).update(normalize(e) for e in asked)
        for line in resolved[name]["metadata"].get("requires_dist") or []:
            req = requirement(line)
            dep = normalize(req.name)
            wanted = req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in {"", *extras[name]})
            if wanted and dep in resolved:
                todo.append((dep, set(req.extras)))
    extras.pop(normalize(project), None)
    return sorted(f"{n}=={resolved[n]['metadata']['version']}" for n in extras)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _split(path: Path, part_bytes: int, into: Path) -> list[Path]:
    """Cut a file into parts of at most `part_bytes`, named `<file>.part-<i>-of-<n>` (joined again by `unpack`)."""
    n = -(-path.stat().st_size // part_bytes)
    parts = []
    with path.open("rb") as f:
        while block := f.read(part_bytes):
            part = into / f"{path.name}{PART}{len(parts) + 1:03d}-of-{n:03d}"
            part.write_bytes(block)
            parts.append(part)
    return parts


def pack(root: Path, part_mib: int | None, bundle_mib: int | None) -> None:
    """Write the manifest; cut files over `part_mib` into parts; group everything into bundles of `bundle_mib`."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = "".join(f"{_sha256(p)}  {p.relative_to(root).as_posix()}\n" for p in files)
    (root / MANIFEST).write_text(manifest)
    limit = (bundle_mib or part_mib or 0) << 20
    if limit:
        for path in files:
            if path.stat().st_size > limit:
                _split(path, limit, path.parent)
                path.unlink()
    if not bundle_mib:
        return
    # First fit, largest first: the fewest bundles, so the fewest trips to the target.
    pieces = sorted((p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST), key=lambda p: -p.stat().st_size)
    bundles: list[list[Path]] = []
    sizes: list[int] = []
    for piece in pieces:
        n = piece.stat().st_size
        fit = next((i for i, used in enumerate(sizes) if used + n <= limit), None)
        if fit is None:
            bundles.append([])
            sizes.append(0)
            fit = len(bundles) - 1
        bundles[fit].append(piece)
        sizes[fit] += n
    for i, members in enumerate(bundles, 1):
        bundle = root / f"bundle-{i:02d}"
        for piece in members:
            target = bundle / piece.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            piece.rename(target)
        shutil.copy(root / MANIFEST, bundle / MANIFEST)  # each bundle tells what the whole holds
    for folder in sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith("bundle-")), reverse=True):
        shutil.rmtree(folder)
    (root / MANIFEST).unlink()
    print(f"{len(bundles)} bundles of at most {bundle_mib} MiB in {root}")


def _complete(pieces: list[Path]) -> bool:
    """A whole file, or every part 1..n of one."""
    if len(pieces) == 1 and PART not in pieces[0].name:
        return True
    numbers = [re.search(r"\.part-(\d+)-of-(\d+)$", p.name) for p in pieces]
    if not all(numbers):
        return False
    total = int(numbers[0].group(2))
    return sorted(int(m.group(1)) for m in numbers) == list(range(1, total + 1))


def unpack(source: Path, stage: Path) -> int:
    """Join parts and gather files from `source` (bundles or a plain wheelhouse) into `stage`; check the manifest."""
    manifests = sorted(source.rglob(MANIFEST))
    if not manifests:
        raise SystemExit(f"error: no {MANIFEST} under {source}: build the wheelhouse with scripts/wheelhouse.sh")
    expected = {}
    for line in manifests[0].read_text().splitlines():
        digest, rel = line.split("  ", 1)
        expected[rel] = digest
    found: dict[str, list[Path]] = {}
    for path in source.rglob("*"):
        if not path.is_file() or path.name == MANIFEST:
            continue
        base = re.sub(r"^bundle-\d+/", "", path.relative_to(source).as_posix())
        whole = base.split(PART)[0] if PART in base else base
        found.setdefault(whole, []).append(path)
    missing = sorted(set(expected) - set(found))
    missing += sorted(rel for rel, pieces in found.items() if rel in expected and not _complete(pieces))
    if missing:
        raise SystemExit(
            f"error: the wheelhouse at {source} lacks {len(missing)} files or parts (first: {missing[0]}): "
            "copy every bundle"
        )
    for rel, digest in expected.items():
        target = stage / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        pieces = sorted(found[rel], key=lambda p: p.name)
        with target.open("wb") as out:
            for piece in pieces:
                with piece.open("rb") as f:
                    shutil.copyfileobj(f, out, CHUNK)
        if _sha256(target) != digest:
            raise SystemExit(f"error: {rel} in {source} does not match its checksum: copy its bundle or parts again")
    return len(expected)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="print name==version of the wheels to carry")
    p.add_argument("report", type=Path)
    p.add_argument("--have", default="", help="comma-separated names the target has (name* matches a prefix)")
    p.add_argument("--project", default="aitp")
    k = sub.add_parser("pack", help="write the manifest, cut parts and bundles")
    k.add_argument("root", type=Path)
    k.add_argument("--part-mib", type=int)
    k.add_argument("--bundle-mib", type=int)
    u = sub.add_parser("unpack", help="join parts and bundles into one folder, checked against the manifest")
    u.add_argument("source", type=Path)
    u.add_argument("stage", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "plan":
        print("\n".join(plan(json.loads(args.report.read_text()), args.have.split(","), args.project)))
    elif args.cmd == "pack":
        pack(args.root, args.part_mib, args.bundle_mib)
    else:
        print(f"{unpack(args.source, args.stage)} files checked into {args.stage}")


if __name__ == "__main__":
    main(sys.argv[1:])
