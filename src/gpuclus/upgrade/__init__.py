"""Rolling upgrades: a pinned version changed in the spec, applied node by node (drain, upgrade, check, resume)."""
