#!/usr/bin/env bash
# The README's first command: install gpuclus, write a spec for a 3-node lab,
# check it and render the Ansible inventory from it.
# (Sandbox nodes, deploy and validate join this flow as their issues land.)
#   bash scripts/quickstart.sh [WORKDIR]      (default WORKDIR: ./demo)
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-demo}"
bash scripts/bootstrap.sh
gpuclus=".venv/bin/gpuclus"
mkdir -p "$work"

set -x
"$gpuclus" init --name demo --controller head=10.0.0.10 \
  --compute 'gpu[01-02]=10.0.0.[11-12]' --gpus-per-node 2 \
  --output "$work/cluster.yaml" --force
"$gpuclus" spec check "$work/cluster.yaml"
"$gpuclus" render "$work/cluster.yaml" --output "$work/rendered" --force
.venv/bin/ansible-inventory -i "$work/rendered/inventory/hosts.yml" --graph
