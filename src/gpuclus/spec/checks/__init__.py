"""Checks of meaning: rules across fields that the schema cannot express, one module per part of the spec.

Each check is a small function returning findings; every one runs, so a spec
with five problems shows five findings at once. Codes are stable: scripts and
docs/spec.md refer to them, so never rename one, only add new ones (``codes``
lists them all).

``view`` holds what every check reads (``SpecView``) and how a module marks
its checks; each domain module lists its own in ``CHECKS``, in the order they
run; ``registry`` puts the modules in order and runs them. The domains, in
that order: nodes (roles, names, addresses), failover (the backup
controller), partitions, nfs, monitoring, pytorch (and modules), containers,
nvidia, users (the login node, the users file, the directory).
``control_files`` reads the files a spec names on the control machine.
"""
