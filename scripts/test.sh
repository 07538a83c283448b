#!/usr/bin/env bash
# The whole test suite: install with dev tools, lint, type-check, test.
# .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh --dev
export PATH="$PWD/.venv/bin:$PATH"
# The job templates' and validate's CPU maths tests run real PyTorch: the CPU
# wheel from /opt/wheels, where this machine has it (a plain torch from PyPI
# is a CUDA build of several GB). The sandbox's pytorch phase installs the
# same wheel on the nodes from a wheelhouse (the integration tests use it).
if ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
  pip install -q --find-links /opt/wheels "torch==2.13.0+cpu" numpy
  bash scripts/wheelhouse.sh .cache/wheelhouse
fi

step() { printf '\n==> %s\n' "$*"; }

# `gpuclus image build` packs images with mksquashfs; its tests want the real
# one (they skip, saying so, where it cannot be installed).
if ! command -v mksquashfs >/dev/null && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  step "installing squashfs-tools"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends squashfs-tools >/dev/null
fi

# The alert-rule and dashboard-query tests run Debian's promtool and a
# throwaway Prometheus on this machine (unpacked, not installed).
step "prometheus tools (promtool, prometheus)"
bash scripts/prometheus_tools.sh

step "ruff"
ruff check src tests benchmarks
ruff format --check src tests benchmarks
step "mypy"
mypy
step "yamllint"
yamllint --strict .
if compgen -G "roles/*/tasks/main.yml" >/dev/null; then
  step "ansible-lint"
  ansible-lint
fi
step "pytest"
pytest --durations=25
# Each role alone on Debian 12 sandbox nodes (munge + slurm, nfs, prometheus;
# nvidia: Debian's real driver packages on a node where no module can load;
# enroot): converge, idempotence, verify each time. molecule's 3-node `cluster`
# scenario (Debian 13 nodes) repeats what the integration suite covers and is
# left to `molecule test -s cluster`. The cluster suite's core on Debian 13
# nodes is scripts/test-debian13.sh: not run here until the suite's time
# leaves room under CI's limit (README, Operating systems).
for scenario in slurm nfs prometheus nvidia enroot; do
  step "molecule $scenario (converge, idempotence, verify)"
  molecule test -s "$scenario"
done
step "README quickstart"
work=$(mktemp -d)
repo=$PWD
cleanup() {
  (cd "$work/demo" 2>/dev/null && "$repo/.venv/bin/gpuclus" sandbox down) || true
  rm -rf "$work"
}
trap cleanup EXIT
bash scripts/quickstart.sh "$work/demo"
