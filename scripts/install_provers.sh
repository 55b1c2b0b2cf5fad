#!/usr/bin/env bash
# Install the theorem provers aitp's proving backends use (Debian/Ubuntu), idempotently:
#   coq                      -> the Coq backend (coqidetop) and the coq-stdlib theorem set (libcoq-stdlib)
#   libcoq-hammer + eprover + z3 + cvc5 -> CoqHammer's automation tactics (sauto, hammer) and the ATPs hammer calls
#   hol-light + libnum-ocaml -> the HOL Light backend and the hol-core theorem set
#   chromium + chromium-driver -> headless browser tests of `aitp viz proof` pages (selenium)
# Usage: scripts/install_provers.sh          (as root, or with sudo available)
# LeanDojo is a Python extra (`pip install 'aitp[lean]'`) plus a Lean toolchain; it is not installed here.
set -euo pipefail

packages=(coq libcoq-hammer eprover z3 cvc5 hol-light libnum-ocaml-dev ocaml-compiler-libs chromium chromium-driver)
missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "provers already installed: ${packages[*]}"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "provers: skipped, no apt-get here: install ${missing[*]} (or your distribution's coq and hol-light) by hand"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "error: installing ${missing[*]} needs root: run as root or install sudo" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

command -v coqidetop.opt >/dev/null 2>&1 || command -v coqidetop >/dev/null 2>&1 || {
  echo "error: coqidetop missing after installing coq" >&2
  exit 1
}
command -v eprover >/dev/null 2>&1 || { echo "error: eprover missing after installing eprover" >&2; exit 1; }
test -f /usr/share/hol-light/hol.ml || { echo "error: /usr/share/hol-light/hol.ml missing after installing hol-light" >&2; exit 1; }
command -v chromedriver >/dev/null 2>&1 || { echo "error: chromedriver missing after installing chromium-driver" >&2; exit 1; }
echo "provers installed: ${packages[*]}"
