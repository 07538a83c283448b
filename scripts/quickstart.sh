#!/usr/bin/env bash
# The README's first command: install gpuclus as a user would (a wheel built
# from this checkout, installed by `uv tool install` with the Ansible
# collections beside it: scripts/install.sh), bring up a 3-node sandbox
# (local systemd container nodes with fake GPUs, reachable over SSH), deploy
# the cluster on it (hosts, SSH trust, NFS, Slurm with accounting, Prometheus,
# and Enroot + Pyxis when their release sources are at hand) and prove it works
# with `gpuclus validate` (Slurm jobs on every node; fake GPUs are reported as
# SKIP).
#   bash scripts/quickstart.sh [WORKDIR]      (default WORKDIR: ./demo, under the repository)
# Enroot and Pyxis come from no package repository: they are built from the
# release sources (enroot-<v>-src.tar.gz, pyxis-<v>-src.tar.gz) in
# $GPUCLUS_ARTIFACTS_DIR, else in <repository>/../shared/artifacts when that is
# a directory (`sandbox up --artifacts`); then a Slurm job also runs in the
# sandbox's test image through Pyxis. Without them the containers phase is off.
# Needs root on Debian/Ubuntu: the nodes are privileged containers; podman,
# runc and debootstrap are installed with apt when missing.
# GPUCLUS_SANDBOX_OS=debian13 runs the same on Debian 13 nodes (Slurm 24.11);
# the default is Debian 12 (`gpuclus sandbox up --os`). GPUCLUS_SANDBOX_NAME and
# GPUCLUS_SANDBOX_SUBNET name the sandbox and fix its subnet (default: sandbox,
# the first free /24 of 10.213.0.0/16), for a run beside another sandbox.
# GPUCLUS_SANDBOX_WHEELHOUSE (`sandbox up --wheelhouse`; scripts/wheelhouse.sh
# fills one) turns on the PyTorch phase too: Lmod, a node-local PyTorch
# environment built from those wheels, and the job templates.
set -euo pipefail
# A relative GPUCLUS_ARTIFACTS_DIR means from where the script was started.
artifacts="${GPUCLUS_ARTIFACTS_DIR:-}"
if [ -n "$artifacts" ]; then
  if [ ! -d "$artifacts" ]; then
    echo "error: GPUCLUS_ARTIFACTS_DIR=$artifacts is not a directory" \
      "(hint: the directory holding enroot-<v>-src.tar.gz and pyxis-<v>-src.tar.gz, or leave it unset)" >&2
    exit 2
  fi
  artifacts="$(cd "$artifacts" && pwd)"
fi
cd "$(dirname "$0")/.."
if [ -z "$artifacts" ] && [ -d ../shared/artifacts ]; then
  artifacts="$(cd ../shared/artifacts && pwd)"
fi
work="${1:-demo}"
# The roles, playbooks and templates the run uses are the wheel's, not this checkout's.
gpuclus=$(bash scripts/install.sh)
head="${GPUCLUS_SANDBOX_NAME:-sandbox}-head"
up=(--nodes 3 --gpus-per-node 2)
if [ -n "$artifacts" ]; then
  up+=(--artifacts "$artifacts")
fi
mkdir -p "$work"
cd "$work"

set -x
"$gpuclus" sandbox up "${up[@]}"
"$gpuclus" sandbox status
"$gpuclus" spec check sandbox.yaml
"$gpuclus" deploy sandbox.yaml
"$gpuclus" sandbox ssh "$head" -- sinfo
"$gpuclus" sandbox ssh "$head" -- srun --nodes=2 --gres=gpu:1 hostname
if [ -n "$artifacts" ]; then
  # Each compute node's own copy of the test image (sandbox up builds it), run
  # by Pyxis. Plain words only: ssh hands the command to the node's shell.
  "$gpuclus" sandbox ssh "$head" -- srun --nodes=2 \
    --container-image=/var/lib/gpuclus-sandbox/images/test.sqsh grep -e ^NAME= -e ^ID= /etc/os-release
fi
"$gpuclus" validate sandbox.yaml
