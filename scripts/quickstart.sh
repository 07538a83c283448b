#!/usr/bin/env bash
# The README's first command: install gpuclus, bring up a 3-node sandbox
# (local systemd container nodes with fake GPUs, reachable over SSH), deploy
# the cluster on it (hosts, SSH trust, NFS, Slurm with accounting, Prometheus)
# and prove it works with `gpuclus validate` (Slurm jobs on every node; fake
# GPUs are reported as SKIP).
#   bash scripts/quickstart.sh [WORKDIR]      (default WORKDIR: ./demo)
# Needs root on Debian/Ubuntu: the nodes are privileged containers; podman,
# runc and debootstrap are installed with apt when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-demo}"
bash scripts/bootstrap.sh
gpuclus="$PWD/.venv/bin/gpuclus"
mkdir -p "$work"
cd "$work"

set -x
"$gpuclus" sandbox up --nodes 3 --gpus-per-node 2
"$gpuclus" sandbox status
"$gpuclus" spec check sandbox.yaml
"$gpuclus" deploy sandbox.yaml
"$gpuclus" sandbox ssh sandbox-head -- sinfo
"$gpuclus" sandbox ssh sandbox-head -- srun --nodes=2 --gres=gpu:1 hostname
"$gpuclus" validate sandbox.yaml
