#!/usr/bin/env bash
# The cluster suite's core on Debian 13 sandbox nodes (Slurm 24.11, nfs-ganesha
# 6, Enroot + Pyxis rebuilt against 24.11): deploy, a re-deploy that changes
# nothing, jobs, NFS, container jobs, Prometheus and the dashboards' queries,
# validate healthy and after faults that need no long repair (plus MPI), the
# health check, drift and failover. The day-two, deploy-fault and slow
# validate-fault tests run on Debian 12 only (the same code). Needs root and
# what scripts/test.sh installs (run that once first); about 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
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
  tests/integration/test_cluster_failover.py "$@"
