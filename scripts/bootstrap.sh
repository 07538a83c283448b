#!/usr/bin/env bash
# Install gpuclus into ./.venv on Debian/Ubuntu (run as root on a fresh machine,
# or as any user when python3-venv is already there).
#   bash scripts/bootstrap.sh          # gpuclus and its runtime dependencies
#   bash scripts/bootstrap.sh --dev    # plus the test and lint tools
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
[ "${1:-}" = "--dev" ] && extras="[dev]"

say() { printf '==> %s\n' "$*" >&2; }

apt_install() {
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    say "missing: $*; install them with your package manager (needs root), then run this again"
    exit 2
  fi
  say "installing OS packages: $*"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v python3 >/dev/null; then
  apt_install python3 python3-venv
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  say "gpuclus needs Python >= 3.11; this is $(python3 -V 2>&1) (Debian 12 and Ubuntu 24.04 have it)"
  exit 2
fi
# Debian splits venv/ensurepip out of python3.
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  apt_install python3-venv
fi

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi
# The install is editable, so only a change of pyproject.toml (dependencies,
# entry points) needs pip again: a stamp of its hash and the extras skips pip
# when neither changed (.ci/run runs the quickstart, which calls this, while
# its tests use the same .venv; a reinstall would pull gpuclus from under them).
stamp=.venv/.gpuclus-installed
project_hash=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ -f "$stamp" ] && .venv/bin/gpuclus --version >/dev/null 2>&1 &&
  { [ "$(cat "$stamp")" = "$project_hash ${extras}" ] || [ "$(cat "$stamp")" = "$project_hash [dev]" ]; }; then
  say "gpuclus${extras} is installed in .venv (pyproject.toml unchanged since)"
else
  say "installing gpuclus${extras} into .venv"
  rm -f "$stamp"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".${extras}"
  printf '%s %s\n' "$project_hash" "$extras" >"$stamp"
fi
say "done: $(.venv/bin/gpuclus --version)  (run .venv/bin/gpuclus, or add $(pwd)/.venv/bin to PATH)"
