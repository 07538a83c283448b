"""The checks, one module per stage; each module exports CHECKS in run order."""
