"""What every command that talks to Slurm shares: the controller's session, Slurm's command lines and parsers,
and the rules for which releases can run together or follow each other.

validate, status, upgrade, nodes and users all import this package; it imports none of them.
"""
