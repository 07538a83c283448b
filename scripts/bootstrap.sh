#!/usr/bin/env bash
# Install gpuclus into ./.venv on Debian/Ubuntu (run as root on a fresh machine,
# or as any user when python3-venv is already there).
#   bash scripts/bootstrap.sh          # gpuclus and its runtime dependencies
#   bash scripts/bootstrap.sh --dev    # plus the test and lint tools
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
[ "${1:-}" = "--dev" ] && extras="[dev]"

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

need_python_venv
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  say "gpuclus needs Python >= 3.11; this is $(python3 -V 2>&1) (Debian 12 and Ubuntu 24.04 have it;" \
    "elsewhere scripts/install.sh installs gpuclus with a Python uv brings)"
  exit 2
fi

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi
# The install is editable, so only a change of pyproject.toml or
# constraints.txt (dependencies, entry points) or of the commit (the version
# comes from git: hatch-vcs) needs pip again: a stamp of those and the extras
# skips pip when none changed.
stamp=.venv/.gpuclus-installed
commit=$(git rev-parse HEAD 2>/dev/null || echo no-git)
project_hash=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)-$commit
if [ -f "$stamp" ] && .venv/bin/gpuclus --version >/dev/null 2>&1 &&
  { [ "$(cat "$stamp")" = "$project_hash ${extras}" ] || [ "$(cat "$stamp")" = "$project_hash [dev]" ]; }; then
  say "gpuclus${extras} is installed in .venv (pyproject.toml, constraints.txt and the commit unchanged since)"
else
  say "installing gpuclus${extras} into .venv (the versions of constraints.txt)"
  rm -f "$stamp"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -c constraints.txt -e ".${extras}"
  printf '%s %s\n' "$project_hash" "$extras" >"$stamp"
fi
# The Ansible collections the roles use (not Python packages; no Galaxy needed).
bash scripts/collections.sh .venv/bin/python
say "done: $(.venv/bin/gpuclus --version)  (run .venv/bin/gpuclus, or add $(pwd)/.venv/bin to PATH)"
