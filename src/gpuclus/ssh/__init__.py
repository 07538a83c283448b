"""SSH to cluster nodes with gpuclus' own key and known_hosts (paramiko)."""
