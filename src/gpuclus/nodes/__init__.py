"""Day-two node membership: taking nodes out of a deployed cluster (`gpuclus nodes remove`)."""
