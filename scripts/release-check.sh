#!/usr/bin/env bash
# The release check: every test that scripts/test.sh (CI) leaves out for CI's
# time, run by hand before each release beside a passing scripts/test.sh on
# the same commit: together the two run every test there is. Needs root;
# about 65 minutes on 2 cores (the figures of the last run are in
# benchmarks/README.md). Three lanes side by side, each with sandbox subnets
# and cluster names of its own:
#   D12 a Debian 12 cluster (Slurm 22.05): the two validate faults that wait
#       minutes for Slurm's repair, then day two: a node down before and during
#       a deploy, a node added while a job runs and removed again;
#   D13 a Debian 13 cluster (Slurm 24.11): the four validate faults that wait
#       for Slurm's repair, plan stamps, a rolling Pyxis upgrade while a job
#       runs, and last `gpuclus reset` with a deploy from scratch;
#   M   the molecule scenarios of the roles that both CI lanes deploy anyway
#       (slurm, nfs, prometheus, enroot: each role alone, with its idempotence
#       and verify), and the 3-node `cluster` scenario.
# Why these and not others: docs/development.md. Extra arguments go to both
# pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh --dev
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
export PATH="$PWD/.venv/bin:$PATH"
# The sandbox's pytorch phase installs the CPU wheel from /opt/wheels through
# this wheelhouse (as in scripts/test.sh; without it the phase is skipped).
if ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
  bash scripts/wheelhouse.sh .cache/wheelhouse
fi
it=tests/integration
validate=$it/test_cluster_validate.py
log_d12=$(mktemp)
log_d13=$(mktemp)
log_m=$(mktemp)
trap 'rm -f "$log_d12" "$log_d13" "$log_m"' EXIT

step "release check: lanes D12, D13 and M side by side (each prints when all are done)"
(
  step "lane D12: pytest, slow validate faults and day two on Debian 12 nodes"
  GPUCLUS_TEST_CLUSTER=rc12 GPUCLUS_TEST_SUBNET=10.213.110.0/24 pytest --durations=15 -p no:cacheprovider \
    "$validate::test_a_stopped_slurmd_is_named" \
    "$validate::test_gres_conf_claiming_more_gpus_than_the_node_has_is_named" \
    $it/test_cluster_down_node.py $it/test_cluster_nodes.py "$@"
) >"$log_d12" 2>&1 </dev/null &
lane_d12=$!
(
  step "lane D13: pytest, slow validate faults, plan stamps, upgrade and reset on Debian 13 nodes"
  GPUCLUS_TEST_OS=debian13 GPUCLUS_TEST_CLUSTER=rc13 GPUCLUS_TEST_SUBNET=10.213.210.0/24 pytest \
    --durations=15 -p no:cacheprovider \
    "$validate::test_a_stopped_slurmd_is_named" \
    "$validate::test_gres_conf_claiming_more_gpus_than_the_node_has_is_named" \
    "$validate::test_a_stopped_compute_node_is_named" \
    "$validate::test_a_replaced_munge_key_is_named" \
    $it/test_cluster_plan_stamps.py $it/test_cluster_upgrade.py $it/test_cluster_zz_reset.py "$@"
) >"$log_d13" 2>&1 </dev/null &
lane_d13=$!
(
  status=0
  for scenario in slurm nfs prometheus enroot cluster; do
    step "lane M: molecule $scenario (converge, idempotence, verify)"
    GPUCLUS_MOLECULE_SUBNET=10.213.160.0/24 molecule test -s "$scenario" || status=1
  done
  exit "$status"
) >"$log_m" 2>&1 </dev/null &
lane_m=$!

status_d12=0
wait "$lane_d12" || status_d12=$?
status_d13=0
wait "$lane_d13" || status_d13=$?
status_m=0
wait "$lane_m" || status_m=$?
cat "$log_d12" "$log_d13" "$log_m"
step "release check: done"
[ "$status_d12" -eq 0 ] || failure_summary "D12" "$log_d12"
[ "$status_d13" -eq 0 ] || failure_summary "D13" "$log_d13"
[ "$status_m" -eq 0 ] || failure_summary "M" "$log_m"
if [ "$status_d12" -ne 0 ] || [ "$status_d13" -ne 0 ] || [ "$status_m" -ne 0 ]; then
  echo "release check failed: lane D12 exit $status_d12; lane D13 exit $status_d13; lane M exit $status_m" >&2
  exit 1
fi
