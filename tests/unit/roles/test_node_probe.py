"""The node_probe module's comparisons (roles/node_probe/library/node_probe.py), on real files.

The module runs on the nodes under Ansible; here its functions are called on
files in tmp_path, owned by whoever runs the tests, so every "stale" answer
comes from a real lstat, readlink or SHA-1.
"""

from __future__ import annotations

import grp
import hashlib
import importlib.util
import os
import pwd
from pathlib import Path
from types import ModuleType

import pytest

MODULE_PATH = Path(__file__).resolve().parents[3] / "roles" / "node_probe" / "library" / "node_probe.py"


@pytest.fixture(scope="module")
def probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("node_probe", MODULE_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


@pytest.fixture()
def me() -> tuple[str, str]:
    return pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name


def test_a_file_as_wanted_is_not_stale(probe: ModuleType, tmp_path: Path, me: tuple[str, str]) -> None:
    path = tmp_path / "hosts"
    path.write_text("10.0.0.1 head\n")
    path.chmod(0o644)
    owner, group = me
    wanted = {"path": str(path), "checksum": sha1("10.0.0.1 head\n"), "owner": owner, "group": group, "mode": "0644"}
    assert probe.file_stale(wanted) is False


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"checksum": sha1("other\n")}, "content"),
        ({"mode": "0600"}, "mode"),
        ({"owner": "no-such-user-here"}, "owner"),
        ({"group": "no-such-group-here"}, "group"),
        ({"state": "directory"}, "type"),
        ({"state": "absent"}, "present where it must not be"),
    ],
)
def test_each_difference_makes_a_file_stale(
    probe: ModuleType, tmp_path: Path, me: tuple[str, str], change: dict[str, str], why: str
) -> None:
    path = tmp_path / "conf"
    path.write_text("setting\n")
    path.chmod(0o644)
    owner, group = me
    wanted = {"path": str(path), "checksum": sha1("setting\n"), "owner": owner, "group": group, "mode": "0644"}
    assert probe.file_stale(wanted | change) is True, why


def test_owner_and_group_may_be_numbers(probe: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text("x")
    assert probe.file_stale({"path": str(path), "owner": str(os.getuid()), "group": os.getgid()}) is False
    assert probe.file_stale({"path": str(path), "owner": str(os.getuid() + 1)}) is True


def test_missing_paths(probe: ModuleType, tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing")
    assert probe.file_stale({"path": missing}) is True
    assert probe.file_stale({"path": missing, "state": "directory"}) is True
    assert probe.file_stale({"path": missing, "state": "absent"}) is False


def test_links_compare_their_target(probe: ModuleType, tmp_path: Path) -> None:
    link = tmp_path / "mask"
    link.symlink_to("/dev/null")
    assert probe.file_stale({"path": str(link), "state": "link", "src": "/dev/null"}) is False
    assert probe.file_stale({"path": str(link), "state": "link", "src": "/srv/other"}) is True
    assert probe.file_stale({"path": str(link), "state": "file"}) is True


def test_contains_asks_for_words_not_the_whole_file(probe: ModuleType, tmp_path: Path) -> None:
    keys = tmp_path / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAAmine admin@laptop\nssh-ed25519 AAAAcluster gpuclus cluster lab\n")
    assert probe.file_stale({"path": str(keys), "contains": ["AAAAcluster"]}) is False
    assert probe.file_stale({"path": str(keys), "contains": ["AAAAcluster", "AAAAnew"]}) is True


def test_home_relative_paths_are_expanded(probe: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir(mode=0o700)
    (tmp_path / ".ssh").chmod(0o700)
    assert probe.file_stale({"path": "~/.ssh", "state": "directory", "mode": "0700"}) is False


def test_fstab_lines_must_match_field_for_field(
    probe: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fstab = tmp_path / "fstab"
    fstab.write_text("# static\n10.0.0.1:/srv/nfs/shared /shared nfs rw,hard 0 0\n")
    real_open = open

    def fake_open(path: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        return real_open(fstab if path == "/etc/fstab" else path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", fake_open)
    entry = {"src": "10.0.0.1:/srv/nfs/shared", "path": "/shared", "fstype": "nfs", "opts": "rw,hard"}
    assert probe.stale_fstab([entry]) == []
    assert probe.stale_fstab([entry | {"opts": "rw,soft"}]) == ["/shared"]
    # /shared is not mounted on the machine running the tests.
    assert probe.stale_fstab([entry | {"mounted": True}]) == ["/shared"]


class _Systemctl:
    """Answers the module's systemctl calls as systemd does (no systemd to ask on the test host)."""

    def __init__(self, show: str, enabled: set[str]) -> None:
        self.show, self.enabled = show, enabled

    def get_bin_path(self, name: str) -> str:
        return f"/usr/bin/{name}"

    def run_command(self, argv: list[str]) -> tuple[int, str, str]:
        if argv[1] == "show":
            return 0, self.show, ""
        return (0 if argv[-1] in self.enabled else 1), "", ""


def test_units_report_their_load_state_so_a_check_run_can_tell_missing_from_stopped(probe: ModuleType) -> None:
    # `systemctl show` prints properties in its own order, one block per unit.
    show = (
        "LoadState=loaded\nActiveState=active\n\n"
        "ActiveState=inactive\nLoadState=loaded\n\n"
        "LoadState=not-found\nActiveState=inactive\n"
    )
    systemctl = _Systemctl(show, enabled={"munge", "chrony"})
    stale, states = probe.unit_states(systemctl, ["munge", "chrony", "slurmd"])
    assert stale == ["chrony", "slurmd"]
    assert states == {"munge": "loaded", "chrony": "loaded", "slurmd": "not-found"}


def test_units_without_systemctl_are_all_stale_and_unknown(probe: ModuleType) -> None:
    class NoSystemctl(_Systemctl):
        def get_bin_path(self, name: str) -> str | None:  # type: ignore[override]
            return None

    stale, states = probe.unit_states(NoSystemctl("", set()), ["munge"])
    assert stale == ["munge"]
    assert states == {"munge": "unknown"}


class _Dpkg(_Systemctl):
    """Answers dpkg-query as dpkg does: package, tab, the abbreviated status."""

    def __init__(self, listing: str) -> None:
        super().__init__("", set())
        self.listing = listing

    def get_bin_path(self, name: str) -> str | None:  # type: ignore[override]
        return "/usr/bin/dpkg-query" if name == "dpkg-query" else None

    def run_command(self, argv: list[str]) -> tuple[int, str, str]:
        return 1, self.listing, ""


def test_a_held_package_is_installed_and_a_removed_one_is_not(probe: ModuleType) -> None:
    listing = "nvidia-driver\thi \nmunge\tii \nslurmd\trc \nchrony\tun \n"
    found = probe.installed_packages(_Dpkg(listing), ["nvidia-driver", "munge", "slurmd", "chrony"])
    assert found == {"nvidia-driver", "munge"}
