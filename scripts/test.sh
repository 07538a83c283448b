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
# Then, side by side (the two overlap their waits on apt, Slurm and systemd):
# - the cluster suite's core again on Debian 13 nodes (Slurm 24.11, nfs-ganesha
#   6, Enroot + Pyxis rebuilt against 24.11): deploy, a re-deploy that changes
#   nothing, jobs, NFS, container jobs, Prometheus and the dashboards' queries,
#   validate healthy and after faults that need no long repair, the health
#   check, drift, failover. The day-two, deploy-fault and slow validate-fault
#   tests run on Debian 12 only (the same code; README, Operating systems);
# - each role alone on Debian 12 sandbox nodes in molecule (munge + slurm, nfs,
#   prometheus; nvidia: Debian's real driver packages on a node where no module
#   can load; enroot), converge, idempotence, verify. molecule's 3-node `cluster`
#   scenario (Debian 13 nodes) repeats what the two pytest runs cover and is
#   left to `molecule test -s cluster`.
d13_log=$(mktemp)
step "pytest on Debian 13 nodes (in the background; its output follows the molecule runs)"
GPUCLUS_TEST_OS=debian13 GPUCLUS_TEST_CLUSTER=itd13 GPUCLUS_TEST_SUBNET=10.213.200.0/24 pytest --durations=10 \
  tests/integration/test_cluster.py tests/integration/test_cluster_containers.py \
  tests/integration/test_cluster_config_drift.py tests/integration/test_cluster_monitoring.py \
  "tests/integration/test_cluster_validate.py::test_a_healthy_cluster_passes_five_runs_in_a_row" \
  "tests/integration/test_cluster_validate.py::test_healthy_figures_are_real" \
  "tests/integration/test_cluster_validate.py::test_fake_gpus_are_skipped_with_the_reason_never_passed" \
  "tests/integration/test_cluster_validate.py::test_validate_leaves_no_job_behind" \
  "tests/integration/test_cluster_validate.py::test_ctrl_c_leaves_no_job_queued_or_running" \
  "tests/integration/test_cluster_validate.py::test_a_removed_nfs_export_is_named" \
  "tests/integration/test_cluster_validate.py::test_a_prometheus_target_down_is_named" \
  "tests/integration/test_cluster_validate.py::test_the_cluster_is_healthy_after_all_the_faults" \
  "tests/integration/test_cluster_validate.py::test_mpi_hello_runs_across_the_nodes_once_mpi_is_installed" \
  "tests/integration/test_cluster_health.py::test_slurm_runs_the_check_on_every_compute_node" \
  "tests/integration/test_cluster_health.py::test_a_missing_gpu_drains_the_node_and_its_repair_resumes_it" \
  "tests/integration/test_cluster_health.py::test_a_stopped_munge_is_reported" \
  tests/integration/test_cluster_failover.py >"$d13_log" 2>&1 &
d13_pid=$!
for scenario in slurm nfs prometheus nvidia enroot; do
  step "molecule $scenario (converge, idempotence, verify)"
  molecule test -s "$scenario"
done
d13_status=0
wait "$d13_pid" || d13_status=$?
step "pytest on Debian 13 nodes: its output"
cat "$d13_log"
rm -f "$d13_log"
if [ "$d13_status" -ne 0 ]; then
  echo "pytest on Debian 13 nodes failed (exit $d13_status)" >&2
  exit "$d13_status"
fi
step "README quickstart"
work=$(mktemp -d)
repo=$PWD
cleanup() {
  (cd "$work/demo" 2>/dev/null && "$repo/.venv/bin/gpuclus" sandbox down) || true
  rm -rf "$work"
}
trap cleanup EXIT
bash scripts/quickstart.sh "$work/demo"
