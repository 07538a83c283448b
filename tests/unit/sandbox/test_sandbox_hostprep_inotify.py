"""fs.inotify.max_user_instances for many sandbox nodes: raised (saying so), or refused with the command.

Each node's systemd holds inotify instances counted against the host's root;
at Linux's default of 128 the 18th node stalls at boot. The setting is a file
in tmp_path here, never the host's own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclus.errors import UsageError
from gpuclus.sandbox import hostprep


@pytest.fixture
def setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "max_user_instances"
    path.write_text("128\n")
    monkeypatch.setattr(hostprep, "INOTIFY_INSTANCES_FILE", path)
    return path


def test_a_low_limit_is_raised_for_the_nodes_and_said(setting: Path) -> None:
    said: list[str] = []
    hostprep.ensure_inotify_instances(24, install=True, say=said.append)
    assert int(setting.read_text()) == hostprep.inotify_instances_needed(24) == 128 + 16 * 24
    assert said == ["raised fs.inotify.max_user_instances from 128 to 512 for 24 nodes (until reboot)"]


def test_a_limit_that_is_enough_is_left_as_it_is(setting: Path) -> None:
    setting.write_text("8192\n")
    said: list[str] = []
    hostprep.ensure_inotify_instances(24, install=True, say=said.append)
    assert setting.read_text() == "8192\n"
    assert said == []


def test_no_install_refuses_with_the_sysctl_command(setting: Path) -> None:
    with pytest.raises(UsageError) as refused:
        hostprep.ensure_inotify_instances(3, install=False, say=print)
    assert "3 sandbox nodes need fs.inotify.max_user_instances >= 176 (it is 128)" in str(refused.value)
    assert refused.value.hint is not None and "sysctl -w fs.inotify.max_user_instances=176" in refused.value.hint
    assert setting.read_text() == "128\n"


def test_no_such_setting_is_nothing_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostprep, "INOTIFY_INSTANCES_FILE", tmp_path / "absent")
    hostprep.ensure_inotify_instances(100, install=False, say=print)
    assert not (tmp_path / "absent").exists()
