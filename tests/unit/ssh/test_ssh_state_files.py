"""gpuclus' known_hosts and SSH key are read through the bounded reader, never by paramiko's own open().

paramiko's load_host_keys and key_filename open the file themselves: a FIFO
put in place of either would block every connection before it starts. The
client reads known_hosts bounded and hands paramiko each line, and refuses a
key file that is not a regular file, in one line, before any socket opens.
"""

from __future__ import annotations

import os
from pathlib import Path

import paramiko
import pytest
from deadline import within

from gpuclus.errors import UsageError
from gpuclus.ssh.client import SshTarget, _load_known_hosts, connect


def _target(tmp_path: Path) -> SshTarget:
    # Port 9 on localhost: nothing answers, so any test that got as far as a socket fails fast.
    return SshTarget("127.0.0.1", "admin", tmp_path / "id_ed25519", tmp_path / "known_hosts", port=9)


@pytest.mark.parametrize("which", ["known_hosts", "id_ed25519"])
def test_a_fifo_in_place_of_known_hosts_or_the_key_is_refused_before_connecting(tmp_path: Path, which: str) -> None:
    target = _target(tmp_path)
    target.key_file.write_text("not read\n")
    (tmp_path / which).unlink(missing_ok=True)
    os.mkfifo(tmp_path / which)
    with within(10), pytest.raises(UsageError, match=f"{tmp_path / which}: cannot read gpuclus' .*: it is a FIFO"):
        connect(target, timeout=1)


def test_known_hosts_lines_reach_paramiko_as_its_own_loader_reads_them(tmp_path: Path) -> None:
    keys = [paramiko.ECDSAKey.generate() for _ in range(3)]
    hashed = paramiko.HostKeys.hash_host("10.0.0.12")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(
        "# a comment\n\n"
        f"10.0.0.10 {keys[0].get_name()} {keys[0].get_base64()} gpuclus:first-contact\n"
        f"head,10.0.0.11 {keys[1].get_name()} {keys[1].get_base64()}\n"
        f"{hashed} {keys[2].get_name()} {keys[2].get_base64()}\n"
        "broken line\n"
    )
    ours, theirs = paramiko.SSHClient(), paramiko.SSHClient()
    _load_known_hosts(ours, known_hosts)
    theirs.load_host_keys(str(known_hosts))
    for host in ("10.0.0.10", "head", "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.99"):
        mine, paramikos = ours.get_host_keys().lookup(host), theirs.get_host_keys().lookup(host)
        assert (dict(mine) if mine else None) == (dict(paramikos) if paramikos else None), host
    assert ours.get_host_keys().lookup("10.0.0.12") is not None
    _load_known_hosts(ours, tmp_path / "none")  # no file yet: nothing known, no error
    # A line whose key is not base64 stops paramiko's own loader with a traceback; here it is skipped.
    with known_hosts.open("a") as stream:
        stream.write(f"10.0.0.13 {keys[0].get_name()} not-base64!\n")
    _load_known_hosts(ours, known_hosts)
    assert ours.get_host_keys().lookup("10.0.0.13") is None and ours.get_host_keys().lookup("head") is not None
