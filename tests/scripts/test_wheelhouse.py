"""The wheelhouse format: what is left out for a target, and bundles/parts that join back byte for byte."""

from __future__ import annotations

import importlib.util
import random
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("wheelhouse", REPO / "scripts" / "wheelhouse.py")
wheelhouse = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wheelhouse)


def _entry(name: str, requires: list[str], requested: bool = False, extras: list[str] | None = None) -> dict:
    entry = {"metadata": {"name": name, "version": "1.0", "requires_dist": requires}, "requested": requested}
    if extras:
        entry["requested_extras"] = extras
    return entry


REPORT = {
    "environment": {"python_version": "3.12", "sys_platform": "linux", "platform_machine": "x86_64"},
    "install": [
        _entry(
            "aitp",
            ["torch>=2.4", "mlflow", "Jinja2", "deepspeed; extra == 'gpu'", "pytest; extra == 'dev'"],
            True,
            ["gpu"],
        ),
        _entry("torch", ["nvidia-cublas-cu12; platform_system == 'Linux'", "jinja2", "sympy"]),
        _entry("nvidia-cublas-cu12", []),
        _entry("sympy", ["mpmath"]),
        _entry("mpmath", []),
        _entry("jinja2", ["MarkupSafe>=2"]),
        _entry("markupsafe", []),
        _entry("mlflow", ["pyarrow<26", "docker; python_version < '3.0'"]),
        _entry("pyarrow", []),
        _entry("docker", []),
        _entry("deepspeed", ["torch", "triton; extra == 'sd'", "hjson"]),
        _entry("triton", []),
        _entry("hjson", []),
        _entry("pytest", []),
    ],
}


def test_plan_leaves_out_what_the_target_has_and_what_only_it_needs():
    carried = wheelhouse.plan(REPORT, ["torch"], "aitp")
    names = {c.split("==")[0] for c in carried}
    # torch's own needs (nvidia-*, sympy, mpmath) go with it; jinja2 stays, since aitp needs it too.
    assert names == {"mlflow", "pyarrow", "jinja2", "markupsafe", "deepspeed", "hjson"}
    assert "triton" not in names and "docker" not in names and "pytest" not in names  # unasked extras, markers
    assert {c.split("==")[0] for c in wheelhouse.plan(REPORT, ["torch", "mlflow"], "aitp")} == {
        "jinja2",
        "markupsafe",
        "deepspeed",
        "hjson",
    }


def test_bundles_and_parts_join_back_and_a_missing_bundle_is_named(tmp_path):
    root = tmp_path / "wh"
    (root / "wheels").mkdir(parents=True)
    rng = random.Random(0)
    blobs = {"wheels/a-1.0-py3-none-any.whl": 300_000, "wheels/big-1.0-py3-none-any.whl": 2_500_000, "extras.txt": 10}
    for rel, size in blobs.items():
        (root / rel).write_bytes(rng.randbytes(size))
    original = {rel: (root / rel).read_bytes() for rel in blobs}
    wheelhouse.pack(root, None, 1)  # bundles of 1 MiB: the big wheel is cut into three parts
    bundles = sorted(p.name for p in root.iterdir())
    assert len(bundles) >= 3 and all(b.startswith("bundle-") for b in bundles)
    assert all(sum(f.stat().st_size for f in (root / b).rglob("*") if f.is_file()) <= (1 << 20) + 4096 for b in bundles)

    carried = tmp_path / "carried"  # bundles copied one by one into one folder, as on the target
    for b in bundles:
        shutil.copytree(root / b, carried / b)
    stage = tmp_path / "stage"
    assert wheelhouse.unpack(carried, stage) == len(blobs)
    assert {rel: (stage / rel).read_bytes() for rel in blobs} == original

    part = next(carried.rglob("big-1.0-py3-none-any.whl.part-002-of-003"))
    part.write_bytes(part.read_bytes()[:-1] + b"\0")  # one byte off in one part
    with pytest.raises(SystemExit, match="does not match its checksum"):
        wheelhouse.unpack(carried, tmp_path / "stage2")
    shutil.rmtree(carried / bundles[-1])
    with pytest.raises(SystemExit, match="lacks .* copy every bundle"):
        wheelhouse.unpack(carried, tmp_path / "stage3")
