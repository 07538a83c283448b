"""gpuclus status: one look at a deployed cluster (Slurm nodes, partitions, queue, services, scrape targets).

expected (what the spec says should run where) → collect (one SSH round trip per
node, in parallel) → parse (raw command output → typed values) → verdict (the
whole picture and its problems) → cli/status.py shows it.
"""
