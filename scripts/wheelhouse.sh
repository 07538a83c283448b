#!/usr/bin/env bash
# Fill a wheelhouse for the sandbox's PyTorch environment: torch 2.13.0 (the
# CPU build this project's machines keep in /opt/wheels) and numpy, with
# their dependencies, for the nodes' Python (Debian 12: CPython 3.11 on
# x86_64), whatever this machine's Python is. The nodes install from it with
# --no-index: they reach no PyPI.
#
#   bash scripts/wheelhouse.sh [DIR]     (default: .cache/wheelhouse)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.cache/wheelhouse}
torch_version=2.13.0
wheels=${GPUCLUS_TORCH_WHEELS:-/opt/wheels}
if ! ls "$wheels"/torch-"$torch_version"+cpu-*.whl >/dev/null 2>&1; then
  echo "error: no torch-$torch_version+cpu wheel in $wheels" >&2
  echo "hint: set GPUCLUS_TORCH_WHEELS to a directory holding it (a plain torch from PyPI is a CUDA build of several GB)" >&2
  exit 2
fi
mkdir -p "$dir"
pip=python3
[ -x .venv/bin/python ] && pip=.venv/bin/python
"$pip" -m pip download --quiet --disable-pip-version-check \
  --dest "$dir" --find-links "$wheels" \
  --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any \
  "torch==$torch_version+cpu" numpy 2> >(grep -v "is ignored: it is neither" >&2)
echo "wheelhouse: $dir ($(ls "$dir"/*.whl | wc -l) wheels, $(du -sh "$dir" | cut -f1))"
