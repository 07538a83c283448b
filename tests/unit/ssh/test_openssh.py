"""The OpenSSH client's words: a user's command never becomes an ssh option, a path reaches ssh_config whole.

The real ssh answers where it is installed: `ssh -G` prints the configuration it resolved and exits without
connecting anywhere.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ssh_reads import resolved

from gpuclus.errors import UsageError
from gpuclus.ssh.openssh import config_value, login_argv

HOSTILE = "-oProxyCommand=touch /tmp/gpuclus-pwned"
SSH = shutil.which("ssh")
needs_ssh = pytest.mark.skipif(SSH is None, reason="the OpenSSH client is not installed")


def argv_for(tmp_path: Path, command: list[str], client: str = "ssh") -> list[str]:
    return login_argv(
        client,
        key_file=tmp_path / "id_ed25519",
        known_hosts=tmp_path / "known_hosts",
        user="gpuclus",
        address="10.0.0.1",
        command=command,
    )


def test_every_option_comes_before_the_double_dash_and_the_destination(tmp_path: Path) -> None:
    argv = argv_for(tmp_path, [HOSTILE, "-t", "sinfo"])
    end = argv.index("--")
    assert argv[end + 1 :] == ["gpuclus@10.0.0.1", HOSTILE, "-t", "sinfo"]
    assert HOSTILE not in argv[:end]


@pytest.mark.parametrize(("user", "address"), [("-oProxyCommand=x", "10.0.0.1"), ("gpuclus", "-oProxyCommand=x")])
def test_a_destination_starting_with_a_dash_is_refused(tmp_path: Path, user: str, address: str) -> None:
    with pytest.raises(UsageError, match="not a destination"):
        login_argv("ssh", key_file=tmp_path / "k", known_hosts=tmp_path / "h", user=user, address=address, command=[])


@needs_ssh
def test_ssh_takes_a_hostile_command_word_as_part_of_the_command(tmp_path: Path) -> None:
    assert SSH is not None
    argv = argv_for(tmp_path, [HOSTILE], client=SSH)
    assert "proxycommand" not in resolved(argv)
    # Without the '--' ssh would have run it: the check above can see the attack.
    argv.remove("--")
    assert resolved(argv)["proxycommand"] == "touch /tmp/gpuclus-pwned"


# A space before '~' (a split path would expand it), quotes, a backslash and '%' (an ssh token).
AWKWARD_DIRECTORY = 'my lab ~/it\'s "100%" a\\b'


@needs_ssh
def test_ssh_reads_a_quoted_path_back_whole(tmp_path: Path) -> None:
    assert SSH is not None
    directory = tmp_path / AWKWARD_DIRECTORY
    argv = login_argv(SSH, key_file=directory / "id", known_hosts=directory / "kh", user="u", address="h", command=[])
    found = resolved(argv)
    assert found["userknownhostsfile"] == str(directory / "kh")
    # -G shows IdentityFile before its tokens are expanded (when the key is loaded, '%%' becomes '%').
    assert found["identityfile"] == str(directory / "id").replace("%", "%%")


@needs_ssh
def test_an_unquoted_path_with_a_space_would_have_been_two_files(tmp_path: Path) -> None:
    # What the rendered ssh_args used to hand ssh: the check above tells the two apart.
    assert SSH is not None
    path = tmp_path / "my lab ~" / "kh"
    found = resolved([SSH, "-o", f"UserKnownHostsFile={path}", "h"])
    assert found["userknownhostsfile"] != str(path)


@pytest.mark.parametrize("text", ["/srv/${HOME}/kh", "/srv/a\nb/kh", "/srv/a\tb"])
def test_what_ssh_cannot_read_back_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="ssh would not read back"):
        config_value(text, what="the known_hosts file")


def test_config_value_escapes() -> None:
    assert config_value('/a b/"c"\\d%e', what="x") == '"/a b/\\"c\\"\\\\d%%e"'
