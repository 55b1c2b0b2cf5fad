"""Debian's provers carried offline: which packages travel, their unpack into a prefix, the Coq backend finding it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aitp.proving.coq import prefix as prover_prefix

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("prover_debs", REPO / "scripts" / "prover_debs.py")
prover_debs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prover_debs)

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="no dpkg-deb here to build or unpack .deb")

# `apt-cache depends` on Debian 12, as written: virtual names with their providers, an alternative (|).
APT_CACHE_DEPENDS = """\
coq
  Depends: libcoq-stdlib
  Depends: <libcoq-core-ocaml-cpf60>
    libcoq-core-ocaml
  Depends: <python3:any>
    python3
  Depends: libc6
  Depends: ocaml-nox
libcvc5parser1
 |Depends: libantlr3c-3.4-0
    libantlr3c-antlrdbg-3.4-0
  Depends: libantlr3c-antlrdbg-3.4-0
  Depends: libstdc++6
libcoq-stdlib
"""


def test_apt_cache_depends_is_read_as_groups_of_alternatives():
    assert prover_debs.parse_depends(APT_CACHE_DEPENDS) == {
        "coq": [["libcoq-stdlib"], ["libcoq-core-ocaml"], ["python3"], ["libc6"], ["ocaml-nox"]],
        "libcvc5parser1": [["libantlr3c-3.4-0", "libantlr3c-antlrdbg-3.4-0"], ["libstdc++6"]],
        "libcoq-stdlib": [],
    }


def test_the_closure_leaves_out_the_targets_runtime_and_the_compilers():
    graph = {
        "coq": [["libcoq-core-ocaml"], ["libc6"], ["ocaml-nox"], ["python3"], ["libgmp10"]],
        "libcoq-core-ocaml": [["ocaml-base"], ["libgmp10"]],
        "ocaml-nox": [["ocaml"], ["gcc"]],  # the compiler: only Coq's package needs it, and proving does not
        "cvc5": [["libcvc5-1"], ["libstdc++6"]],
        "libcvc5-1": [["libcln6", "libcln-dev"], ["gcc-12-base"]],
    }
    asked: list[list[str]] = []

    def depends(names: list[str]) -> dict[str, list[list[str]]]:
        asked.append(names)
        return {n: graph.get(n, []) for n in names}

    carried = prover_debs.closure(("coq", "cvc5"), depends)
    assert carried == ["coq", "cvc5", "libcln6", "libcoq-core-ocaml", "libcvc5-1", "libgmp10", "ocaml-base"]
    assert len(asked) == 3  # one apt call per level, not per package


def _deb(tmp: Path, name: str, files: dict[str, str]) -> Path:
    """A small real .deb (dpkg-deb --build) holding `files`, executable where they start with #!."""
    root = tmp / f"{name}-root"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: aitp <aitp@example.org>\nDescription: test\n"
    )
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if text.startswith("#!") else 0o644)
    deb = tmp / "debs" / f"{name}_1.0_all.deb"
    deb.parent.mkdir(exist_ok=True)
    subprocess.run(["dpkg-deb", "-Znone", "--build", str(root), str(deb)], check=True, capture_output=True)
    return deb


@needs_dpkg
def test_unpacked_debs_are_where_the_coq_backend_looks(tmp_path, monkeypatch, capsys):
    from aitp.proving.coq.extract import coq_theories_dir
    from aitp.proving.coq.protocol import coqidetop_binary

    # coqc answers -where from COQLIB, as a relocated Coq must be told; eprover sits in /bin as Debian's does.
    _deb(tmp_path, "coq", {"usr/bin/coqc": '#!/bin/sh\necho "$COQLIB"\n', "usr/bin/coqidetop.opt": "#!/bin/sh\n"})
    _deb(tmp_path, "libcoq-stdlib", {"usr/lib/ocaml/coq/theories/Init/Prelude.v": "", "usr/lib/ocaml/threads/META": ""})
    _deb(tmp_path, "eprover", {"bin/eprover": "#!/bin/sh\n", "usr/lib/x86_64-linux-gnu/libpicosat.so.1": ""})
    prefix = tmp_path / "project" / ".provers"
    prefix.mkdir(parents=True)
    (prefix / "stale").write_text("from an older wheelhouse")

    assert prover_debs.unpack(tmp_path / "debs", prefix) == 3
    assert not (prefix / "stale").exists() and not prefix.with_name(".provers.partial").exists()
    assert (prefix / "usr" / "lib" / "ocaml" / "threads" / "threads.cma").exists()  # findlib's threads.posix

    monkeypatch.setenv(prover_prefix.PREFIX_ENV, str(prefix))
    assert coqidetop_binary() == str(prefix / "usr" / "bin" / "coqidetop.opt")
    assert prover_prefix.prover_binary("eprover") == str(prefix / "bin" / "eprover")
    assert coq_theories_dir() == prefix / "usr" / "lib" / "ocaml" / "coq" / "theories"
    env = prover_prefix.prover_env()
    path = env["PATH"].split(os.pathsep)
    assert path[:3] == [str(prover_prefix.ATP_NAMES), str(prefix / "usr" / "bin"), str(prefix / "bin")]
    assert env["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(prefix / "usr" / "lib" / "x86_64-linux-gnu")
    assert env["OCAMLLIB"] == str(prefix / "usr" / "lib" / "ocaml")

    assert env["OCAMLFIND_CONF"] == os.devnull  # Debian's /etc/ocamlfind.conf is not carried

    too_new = "#!/bin/sh\necho '/lib/libc.so.6: version GLIBC_2.99 not found' >&2; exit 1\n"
    (prefix / "usr" / "bin" / "coqc").write_text(too_new)
    assert prover_prefix.main() == 1  # Coq does not run here: says so, naming the fix
    assert "build the wheelhouse on a Debian/Ubuntu no newer" in capsys.readouterr().err

    monkeypatch.setenv(prover_prefix.PREFIX_ENV, str(tmp_path / "nowhere"))
    env = prover_prefix.prover_env()  # no prefix: the system's provers, our environment with hammer's ATP names
    assert env["PATH"] == os.pathsep.join([str(prover_prefix.ATP_NAMES), os.environ["PATH"]])
    assert "OCAMLLIB" not in env or env["OCAMLLIB"] == os.environ.get("OCAMLLIB")


@needs_dpkg
def test_a_broken_deb_leaves_the_prefix_as_it_was(tmp_path):
    _deb(tmp_path, "coq", {"usr/bin/coqc": "#!/bin/sh\n"})
    (tmp_path / "debs" / "z3_1.0_all.deb").write_bytes(b"!<arch>\ncut short")
    prefix = tmp_path / ".provers"
    prefix.mkdir()
    (prefix / "kept").write_text("")
    with pytest.raises(SystemExit, match="dpkg-deb -x z3_1.0_all.deb failed .*copy its bundle again"):
        prover_debs.unpack(tmp_path / "debs", prefix)
    assert [p.name for p in prefix.iterdir()] == ["kept"] and not (tmp_path / ".provers.partial").exists()


def test_coqhammers_fixed_folder_is_linked_to_the_prefix_where_allowed(tmp_path):
    prefix = tmp_path / ".provers"
    (prefix / "usr" / "libexec" / "coq-hammer").mkdir(parents=True)
    root = tmp_path / "root"
    assert prover_debs.link_fixed_paths(prefix, root) == []
    link = root / "usr" / "libexec" / "coq-hammer"
    assert link.resolve() == (prefix / "usr" / "libexec" / "coq-hammer").resolve()

    moved = tmp_path / "moved" / ".provers"  # the checkout moved: the old link dangles and is replaced
    moved.parent.mkdir()
    prefix.rename(moved)
    assert prover_debs.link_fixed_paths(moved, root) == [] and link.resolve() == (moved / "usr/libexec/coq-hammer")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "usr").write_text("")  # cannot be made: a note naming the command to run as root
    (note,) = prover_debs.link_fixed_paths(moved, elsewhere)
    assert note.startswith(f"CoqHammer's hammer needs {elsewhere}/usr/libexec/coq-hammer: as root, ln -s ")


# Runs with the system's Coq hidden where a mount namespace can be made (root): its binaries, its OCaml tree and
# findlib's /etc/ocamlfind.conf, as on a GPU image that never had OCaml.
PROVE_THROUGH_PREFIX = textwrap.dedent(
    """
    import subprocess, sys
    from aitp.proving.coq.env import CoqEnv
    from aitp.proving.coq.protocol import coqidetop_binary
    from aitp.proving.env import Theorem
    from aitp.proving.coq.extract import coq_theories_dir
    from aitp.proving.coq.prefix import prover_binary, prover_env

    print(coqidetop_binary(), coq_theories_dir(), prover_binary("eprover"))
    with CoqEnv(tactic_timeout=10.0) as env:
        goal = env.open(Theorem("andb_comm", "", "coq", module="Coq.Bool.Bool"))
        print(env.run_tactic(goal, "intros b1 b2; destruct b1, b2; reflexivity").outcome)
    hammer = "From Hammer Require Import Tactics.\\nLemma l (n m : nat) : n + m = m + n.\\nProof. sauto. Qed.\\n"
    open(sys.argv[1], "w").write(hammer)
    done = subprocess.run([prover_binary("coqc"), sys.argv[1]], capture_output=True, text=True, env=prover_env())
    print("sauto", done.returncode, done.stderr[-300:])
    """
)
HIDE_SYSTEM_COQ = """
set -e
cp -a /etc "$SCRATCH/etc" && rm -rf "$SCRATCH/etc/ocamlfind.conf" "$SCRATCH/etc/ocamlfind.conf.d"
mount --bind "$SCRATCH/etc" /etc
mkdir "$SCRATCH/empty" && touch "$SCRATCH/empty-file"
for d in /usr/lib/ocaml /usr/lib/coq; do [ -d $d ] && mount --bind "$SCRATCH/empty" $d; done
for f in /usr/bin/coq* /usr/bin/eprover /bin/eprover /usr/bin/z3 /usr/bin/cvc5; do
  [ -f $f ] && mount --bind "$SCRATCH/empty-file" $f
done
exec "$@"
"""


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="no apt-get here to download Debian's Coq")
@needs_dpkg
def test_debian_coq_unpacked_into_a_prefix_proves_with_the_system_coq_hidden(tmp_path, monkeypatch):
    if subprocess.run(["apt-cache", "show", "coq", "libcoq-hammer"], capture_output=True).returncode != 0:
        pytest.skip("apt knows no coq or libcoq-hammer here (run apt-get update)")
    packages = prover_debs.download("coq", tmp_path / "debs")
    assert {"coq", "libcoq-stdlib", "libcoq-hammer", "eprover", "z3", "cvc5"} <= set(packages)
    assert not {"libc6", "libstdc++6", "ocaml-nox", "python3"} & set(packages)
    prefix = tmp_path / ".provers"
    assert prover_debs.unpack(tmp_path / "debs", prefix) == len(packages)

    command = [sys.executable, "-c", PROVE_THROUGH_PREFIX, str(tmp_path / "hammer.v")]
    hidden = os.geteuid() == 0 and shutil.which("unshare") is not None
    if hidden:
        probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
        hidden = probe.returncode == 0
    if hidden:
        command = ["unshare", "--mount", "sh", "-c", HIDE_SYSTEM_COQ, "hide", *command]
    env = {**os.environ, prover_prefix.PREFIX_ENV: str(prefix)}
    env["SCRATCH"] = str(tmp_path / "hidden")
    (tmp_path / "hidden").mkdir()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        str(prefix / "usr" / "bin" / "coqidetop.opt"),
        str(prefix / "usr" / "lib" / "ocaml" / "coq" / "theories"),
        str(prefix / "bin" / "eprover"),
    ]
    assert lines[1] == "proved"
    assert lines[2].startswith("sauto 0"), lines[2:]  # CoqHammer's plugin resolves from the prefix
