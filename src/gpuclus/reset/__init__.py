"""`gpuclus reset`: undo a deploy on the nodes (the catalog, the run)."""
