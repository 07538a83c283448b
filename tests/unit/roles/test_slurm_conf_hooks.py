"""slurm.conf's job prolog and epilog (slurm_common): directories of hooks, never an empty pattern.

`Prolog=/etc/slurm/prolog.d/*` and `Epilog=/etc/slurm/epilog.d/*` let roles
drop hooks in (gpu_metrics' GPU job mapping). Slurm 22.05 fails the prolog of
every job, and drains the node, when the pattern matches no file (seen on the
sandbox: "prolog: Unable to create list of paths"), so the role keeps a
do-nothing program in each directory. Rendered with Ansible's own templating
from the role's defaults and vars (tests/unit/role_templates.py).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, group_vars, render, role_variables
from spec_samples import BASE
from test_role_input_guards import input_conditions

from gpuclus.render import render_files
from gpuclus.spec.load import load_spec_text

NOOP = ROLES / "slurm_common" / "templates" / "etc" / "slurm" / "hook.d" / "00-gpuclus-noop.j2"


def slurm_conf(inventory: dict[str, Any], **extra: Any) -> dict[str, str]:
    text = render(
        "slurm_common",
        "etc/slurm/slurm.conf.j2",
        inventory,
        "head",
        __slurm_common_pmix=False,
        __slurm_common_probes={},
        __slurm_common_written_sizes={},
        **extra,
    )
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#") and " " not in line)
    return dict(pair for pair in pairs if len(pair) == 2)


@pytest.fixture(scope="module")
def inventory() -> dict[str, Any]:
    loaded = load_spec_text(yaml.safe_dump(BASE))
    assert loaded.spec is not None and loaded.topology is not None
    files = render_files(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    return group_vars(files)


def templar(inventory: dict[str, Any], **extra: Any) -> Templar:
    variables = role_variables("slurm_common", inventory, "head", {"role_path": str(ROLES / "slurm_common"), **extra})
    return Templar(loader=DataLoader(), variables=variables)


def test_slurm_conf_runs_every_program_of_the_hook_directories(inventory: dict[str, Any]) -> None:
    settings = slurm_conf(inventory)
    assert settings["Prolog"] == "/etc/slurm/prolog.d/*"
    assert settings["Epilog"] == "/etc/slurm/epilog.d/*"


def test_null_leaves_the_prolog_and_epilog_lines_out(inventory: dict[str, Any]) -> None:
    settings = slurm_conf(inventory, slurm_common_prolog_dir=None, slurm_common_epilog_dir=None)
    assert "Prolog" not in settings
    assert "Epilog" not in settings


def test_another_directory_is_named_as_given(inventory: dict[str, Any]) -> None:
    settings = slurm_conf(inventory, slurm_common_prolog_dir="/opt/site/prolog", slurm_common_epilog_dir=None)
    assert settings["Prolog"] == "/opt/site/prolog/*"
    assert "Epilog" not in settings


def test_the_hook_lines_are_applied_by_reconfigure_not_a_restart(inventory: dict[str, Any]) -> None:
    pattern = str(templar(inventory).template(trust_as_template("{{ __slurm_common_restart_pattern }}")))
    assert not re.match(pattern, "Prolog=/etc/slurm/prolog.d/*")
    assert not re.match(pattern, "Epilog=/etc/slurm/epilog.d/*")


def probe_items(inventory: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    # The checksum is a template lookup on the control machine: stood in for here.
    t = templar(inventory, __slurm_common_hook_noop_sha1="0" * 40, **extra)
    items = t.template(trust_as_template("{{ __slurm_common_hook_probe }}"))
    assert isinstance(items, list)
    return items


def test_the_role_keeps_both_directories_and_a_do_nothing_program_in_each(inventory: dict[str, Any]) -> None:
    items = {item["path"]: item for item in probe_items(inventory)}
    assert set(items) == {
        "/etc/slurm/prolog.d",
        "/etc/slurm/prolog.d/00-gpuclus-noop",
        "/etc/slurm/epilog.d",
        "/etc/slurm/epilog.d/00-gpuclus-noop",
    }
    assert items["/etc/slurm/prolog.d"]["state"] == "directory"
    noop = items["/etc/slurm/prolog.d/00-gpuclus-noop"]
    assert (noop["owner"], noop["group"], noop["mode"]) == ("root", "root", "0755")
    assert noop["checksum"] == "0" * 40


def test_without_hook_directories_nothing_is_kept(inventory: dict[str, Any]) -> None:
    assert probe_items(inventory, slurm_common_prolog_dir=None, slurm_common_epilog_dir=None) == []


def test_the_do_nothing_program_succeeds_and_says_nothing(tmp_path: Path) -> None:
    script = tmp_path / "00-gpuclus-noop"
    script.write_text(NOOP.read_text())  # no Jinja in it: the template is the file
    script.chmod(0o755)
    done = subprocess.run([str(script)], capture_output=True, text=True, check=False, env={})
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert NOOP.read_text().startswith("#!/bin/sh\n")


def failing_hook_checks(inventory: dict[str, Any], **extra: Any) -> list[str]:
    checks = [condition for condition in input_conditions("slurm_common") if "_dir" in condition]
    assert checks, "slurm_common's preflight has no check of the hook directories"
    t = templar(inventory, **extra)
    return [condition for condition in checks if not t.evaluate_conditional(trust_as_template(condition))]


def test_the_default_and_null_hook_directories_pass_preflight(inventory: dict[str, Any]) -> None:
    assert failing_hook_checks(inventory) == []
    assert failing_hook_checks(inventory, slurm_common_prolog_dir=None, slurm_common_epilog_dir=None) == []


@pytest.mark.parametrize("hostile", ["/etc/slurm/prolog.d/* /tmp/x", "relative/dir", "/etc/slurm/p\nNodeName=x"])
def test_a_hook_directory_that_is_not_a_plain_path_fails_preflight(inventory: dict[str, Any], hostile: str) -> None:
    assert failing_hook_checks(inventory, slurm_common_epilog_dir=hostile)
