#!/usr/bin/env bash
# The whole test suite: install with dev tools, lint, type-check, test.
# .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh --dev
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
export PATH="$PWD/.venv/bin:$PATH"
# The job templates' and validate's CPU maths tests run real PyTorch: the CPU
# wheel from /opt/wheels, where this machine has it (a plain torch from PyPI
# is a CUDA build of several GB). The sandbox's pytorch phase installs the
# same wheel on the nodes from a wheelhouse (the integration tests use it).
# Lane C installs the wheel into .venv before its unit tests (off the lanes' start).
torch_wheels=false
if ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
  torch_wheels=true
  bash scripts/wheelhouse.sh .cache/wheelhouse
fi

# `gpuclus image build` packs images with mksquashfs, and the slurm.conf tests
# hand the rendered file to Slurm's own parser (scontrol, Debian's slurm-client);
# their tests want the real ones (they skip, saying so, where they cannot be installed).
host_packages=()
command -v mksquashfs >/dev/null || host_packages+=(squashfs-tools)
command -v scontrol >/dev/null || host_packages+=(slurm-client)
if [ "${#host_packages[@]}" -gt 0 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  step "installing ${host_packages[*]}"
  apt_install "${host_packages[@]}"
fi

# The alert-rule and dashboard-query tests run Debian's promtool and a
# throwaway Prometheus on this machine (unpacked, not installed).
step "prometheus tools (promtool, prometheus)"
bash scripts/prometheus_tools.sh

# The linters and the type check run first in lane C, beside the lanes'
# sandbox boots (in front of the lanes they held A and B back three minutes).
# Each one runs even after another failed; the lane fails at its end.
lint() {
  local status=0
  step "ruff"
  ruff check src tests benchmarks || status=1
  ruff format --check src tests benchmarks || status=1
  step "mypy"
  mypy || status=1
  step "yamllint"
  yamllint --strict . || status=1
  if compgen -G "roles/*/tasks/main.yml" >/dev/null; then
    step "ansible-lint"
    ansible-lint || status=1
  fi
  return "$status"
}
# Three lanes run side by side (the integration tests spend much of their time
# waiting on Slurm, systemd and apt, so two cores carry them):
#   A (foreground) the README's quickstart as it stands (gpuclus installed from
#     a wheel of this checkout with uv tool; Debian 12 nodes: sandbox up,
#     deploy, jobs, validate), whose cluster is then the Debian 12
#     suite's (GPUCLUS_TEST_QUICKSTART=1; conftest.py): jobs, containers,
#     PyTorch, monitoring, validate with its faults, hints and reboots;
#   B (background) the cluster suite's core on Debian 13 nodes (Slurm 24.11,
#     scripts/test-debian13.sh): sandbox up --os debian13, deploy, a re-deploy
#     changing nothing, check mode, jobs, NFS, containers, drift, monitoring,
#     validate healthy and after faults, health check, failover, no secret in a
#     verbose deploy's output, users with login containment, the in-sync
#     deploy, and Ctrl-C at random moments of the first deploys of its fresh
#     nodes;
#   C (background) the linters and the type check, the unit tests, the molecule
#     scenarios of the roles no cluster lane deploys the same way (each alone
#     on Debian 12 nodes: nvidia with Debian's real driver packages on a node
#     where no module can load, users, sssd against an OpenLDAP server), the
#     tests with sandboxes of their own (deploy engine, sandbox lifecycle,
#     docker, two directories, a mixed Debian 13/12 sandbox, image build).
# The machine is CPU-bound with three lanes (a fresh deploy uses 1.7 cores
# alone), so each lane does only what no other does: the quickstart's deploy
# is lane A's fixture rather than a cluster of its own, and its steps on
# Debian 13 (sandbox up --os debian13, deploy, validate) are lane B's fixture
# and tests (`GPUCLUS_SANDBOX_OS=debian13 bash scripts/quickstart.sh` runs the
# script itself there). Each step prints the host's CPU seconds used so far.
# Each lane's sandboxes have subnets of their own, so two `sandbox up`s never
# pick the same one. Lanes B and C print their output when A is done.
# The slowest tests (down nodes, nodes add/remove, plan stamps, the rolling
# upgrade, reset, the validate faults that wait for Slurm's repair, molecule
# slurm, nfs, prometheus, enroot and cluster) are scripts/release-check.sh's,
# run by hand before each release. Which test runs where, and why:
# docs/development.md.
it=tests/integration
lane_a_log=$(mktemp)
lane_b_log=$(mktemp)
lane_c_log=$(mktemp)
# A lane goes on after a failing step (each step's result is worth seeing) and fails at its end.
(
  status=0
  step "lane B: pytest, the cluster suite on Debian 13 nodes (scripts/test-debian13.sh)"
  bash scripts/test-debian13.sh --durations=15 -p no:cacheprovider || status=1
  step "lane B: done"
  exit "$status"
) >"$lane_b_log" 2>&1 </dev/null &
lane_b=$!
(
  status=0
  lint || status=1
  if "$torch_wheels"; then
    step "lane C: PyTorch (CPU) into .venv for the unit tests"
    # Byte-compiled at install (most of its CPU), since the job templates' tests run with
    # PYTHONDONTWRITEBYTECODE and would compile torch again in every process.
    pip install -q --find-links /opt/wheels "torch==2.13.0+cpu" numpy || status=1
  fi
  step "lane C: pytest, unit tests"
  pytest --durations=15 -p no:cacheprovider tests/unit || status=1
  for scenario in nvidia users sssd; do
    step "lane C: molecule $scenario (converge, idempotence, verify)"
    GPUCLUS_MOLECULE_SUBNET=10.213.150.0/24 molecule test -s "$scenario" || status=1
  done
  step "lane C: pytest, the tests with sandboxes of their own"
  pytest --durations=15 -p no:cacheprovider \
    $it/test_deploy_engine.py $it/test_sandbox.py $it/test_sandbox_docker.py \
    $it/test_sandbox_two_dirs.py $it/test_sandbox_mixed.py $it/test_image_build.py || status=1
  step "lane C: done"
  exit "$status"
) >"$lane_c_log" 2>&1 </dev/null &
lane_c=$!
step "lane A: the README quickstart, then the cluster suite on its Debian 12 nodes (lanes B and C print after it)"
lane_a_status=0
# Lane A prints as it goes and is kept for the failure summary at the end.
# Two validate fault tests are left out for CI's time (each waits ~2 min for Slurm's repair): a stopped
# slurmd fails launch.srun as the stopped node before it does, and launch.gres-devices' probe is covered
# on recorded output in the unit tests. `pytest tests/integration` runs everything on Debian 12.
GPUCLUS_TEST_QUICKSTART=1 GPUCLUS_TEST_SUBNET=10.213.100.0/24 pytest --durations=25 -p no:cacheprovider \
  $it/test_cluster.py $it/test_cluster_containers.py $it/test_cluster_pytorch.py $it/test_cluster_monitoring.py \
  $it/test_cluster_validate.py $it/test_cluster_hints.py $it/test_cluster_reboot.py \
  --deselect $it/test_cluster_validate.py::test_a_stopped_slurmd_is_named \
  --deselect $it/test_cluster_validate.py::test_gres_conf_claiming_more_gpus_than_the_node_has_is_named \
  2>&1 | tee "$lane_a_log" || lane_a_status=$?
step "lane A: done"
lane_b_status=0
wait "$lane_b" || lane_b_status=$?
lane_c_status=0
wait "$lane_c" || lane_c_status=$?
cat "$lane_b_log" "$lane_c_log"
# A failed run ends with what failed in each lane (failure_summary, scripts/lib.sh):
# CI's record keeps only the end of a long log, where lane C stands.
[ "$lane_a_status" -eq 0 ] || failure_summary "A" "$lane_a_log"
[ "$lane_b_status" -eq 0 ] || failure_summary "B" "$lane_b_log"
[ "$lane_c_status" -eq 0 ] || failure_summary "C" "$lane_c_log"
rm -f "$lane_a_log" "$lane_b_log" "$lane_c_log"
if [ "$lane_a_status" -ne 0 ] || [ "$lane_b_status" -ne 0 ] || [ "$lane_c_status" -ne 0 ]; then
  echo "failed: lane A (quickstart, Debian 12 cluster suite) exit $lane_a_status;" \
    "lane B (Debian 13 cluster suite) exit $lane_b_status;" \
    "lane C (linters, unit tests, molecule, own-sandbox tests) exit $lane_c_status" >&2
  exit 1
fi
