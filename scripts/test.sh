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
# The cluster suite's core again on Debian 13 nodes (Slurm 24.11, nfs-ganesha 6,
# Enroot + Pyxis rebuilt against 24.11): deploy, a re-deploy that changes
# nothing, jobs, NFS, Prometheus, container jobs, validate healthy and after
# injected faults, failover, the health check and drift. The day-two and
# fault-in-deploy tests stay on Debian 12 (the same code; see README, OS table).
step "pytest: the cluster suite on Debian 13 nodes"
GPUCLUS_TEST_OS=debian13 GPUCLUS_TEST_CLUSTER=itd13 pytest --durations=10 \
  tests/integration/test_cluster.py tests/integration/test_cluster_containers.py \
  tests/integration/test_cluster_config_drift.py tests/integration/test_cluster_health.py \
  tests/integration/test_cluster_monitoring.py tests/integration/test_cluster_failover.py \
  tests/integration/test_cluster_validate.py
# Each role alone on sandbox nodes (munge + slurm, nfs, prometheus; nvidia:
# Debian's real driver packages on a node where no module can load), then the
# 3-node cluster with every phase on Debian 13 nodes: converge, idempotence,
# verify each time.
for scenario in slurm nfs prometheus nvidia enroot cluster; do
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
