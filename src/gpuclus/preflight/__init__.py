"""Preflight: can gpuclus deploy to these nodes? Checked over SSH, all nodes in parallel.

One shell probe per node gathers everything (one round trip, ``rules.PROBE``), and pure functions judge the
answers (``rules``, ``gpu``), so the rules are unit-testable without nodes. ``runner.preflight_spec`` runs it
for a spec (`gpuclus preflight`, and deploy's pipeline first). `gpuclus preflight --password` is
``bootstrap.bootstrap_keys``: ``hostkeys.scan_host_keys`` (every node's host key, read without logging in,
judged against gpuclus' known_hosts and an admin's known_hosts file), then ``hostkeys.pin_host_keys`` for the
keys the admin trusted, then ``keyinstall.install_keys``. Nothing here prints or reads the terminal: what must be
seen or answered goes to bootstrap's observer, which cli/preflight.py implements (the keys shown, the
confirmation and the password asked for).
"""
