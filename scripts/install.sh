#!/usr/bin/env bash
# Install gpuclus as a tool, the way a user does: a wheel built from this
# checkout, installed by `uv tool install` into an environment of its own (the
# roles, playbooks and templates inside the wheel), with the exact versions of
# constraints.txt, then the Ansible collections into that environment
# (scripts/collections.sh). Prints the installed gpuclus' path on stdout.
#   bash scripts/install.sh
# uv puts the environment in `uv tool dir` (~/.local/share/uv/tools/gpuclus) and
# the command in `uv tool dir --bin` (~/.local/bin); UV_TOOL_DIR and
# UV_TOOL_BIN_DIR move them. gpuclus needs Python 3.11 or later: uv takes the
# system's when it is one (Debian 12, Ubuntu 24.04) and otherwise installs
# one of its own (Ubuntu 22.04's is 3.10). uv itself comes from PyPI into
# .cache/tools (a venv: Debian's python3 refuses pip installs outside one).
# Needs python3 with venv (installed with apt as root when missing) and git
# (the version is the checkout's, from its tags).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

need_python_venv
tools=.cache/tools
uv_version=$(sed -n 's/^uv==//p' constraints.txt)
if [ "$("$tools/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$uv_version" ]; then
  say "installing uv $uv_version into $tools"
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$uv_version"
fi
uv=$tools/bin/uv

dist=.cache/dist
rm -rf "$dist"
say "building the wheel"
"$uv" build --quiet --wheel --out-dir "$dist" .
wheel=$(ls "$dist"/gpuclus-*.whl)
say "installing $(basename "$wheel") with uv tool (the versions of constraints.txt)"
# --force: replace an earlier install (of this or another checkout); --reinstall:
# the same version number from a changed working tree is still a new wheel.
"$uv" tool install --quiet --force --reinstall --python '>=3.11' --constraints constraints.txt "$wheel"
bash scripts/collections.sh "$("$uv" tool dir)/gpuclus/bin/python"
gpuclus="$("$uv" tool dir --bin)/gpuclus"
say "done: $("$gpuclus" --version) at $gpuclus"
echo "$gpuclus"
