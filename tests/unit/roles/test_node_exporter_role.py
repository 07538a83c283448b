"""Role node_exporter without a node: the flags it writes (textfile directory, systemd collector) and its checks.

The flags file is rendered with Ansible's own templating from the role's
defaults and vars over gpuclus' rendered group_vars
(tests/unit/role_templates.py). The systemd collector's unit pattern is
checked the way the exporter uses it: anchored, ^(?:pattern)$ (Go's regexp
and Python's re agree on this subset: alternation, groups, a class).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from role_templates import ROLES, first_refusal, group_vars, render, role_variables

from gpuclus.render import render_files
from gpuclus.spec.load import load_spec_text

SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: admin}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, monitoring]}
  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 2}, cpus: 8, memory_mb: 16000}
monitoring: {prometheus: true}
"""
ROLE = ROLES / "node_exporter"
DOCS = ROLES.parent / "docs"
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"


def inventory() -> dict[str, Any]:
    loaded = load_spec_text(SPEC)
    assert loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    return group_vars(files)


def flags(**extra: Any) -> list[str]:
    """The exporter's command-line flags as its unit gets them: ARGS of the flags file, split on blanks."""
    text = render("node_exporter", "etc/default/prometheus-node-exporter.j2", inventory(), "gpu01", **extra)
    [line] = [line for line in text.splitlines() if line.startswith("ARGS=")]
    # systemd's EnvironmentFile: one double-quoted value; the unit's $ARGS splits it on blanks.
    value = shlex.split(line.split("=", 1)[1])
    assert len(value) == 1 and "\\" not in value[0], line
    return value[0].split()


def flag(arguments: list[str], name: str) -> str | None:
    values = [argument.split("=", 1)[1] for argument in arguments if argument.startswith(name + "=")]
    assert len(values) <= 1, values
    return values[0] if values else None


def unit_matcher(arguments: list[str]) -> re.Pattern[str]:
    pattern = flag(arguments, "--collector.systemd.unit-include")
    assert pattern is not None
    return re.compile(f"^(?:{pattern})$")


def test_the_textfile_directory_is_named_explicitly() -> None:
    assert flag(flags(), "--collector.textfile.directory") == TEXTFILE_DIR
    assert (
        flag(flags(node_exporter_textfile_dir="/srv/textfiles"), "--collector.textfile.directory") == "/srv/textfiles"
    )


def test_the_systemd_collector_reports_the_clusters_units_only() -> None:
    arguments = flags()
    assert "--collector.systemd" in arguments
    assert "--no-collector.systemd" not in arguments
    matcher = unit_matcher(arguments)
    for unit in ("slurmctld", "slurmd", "slurmdbd", "munge", "prometheus-node-exporter", "nfs-ganesha", "mariadb"):
        assert matcher.match(f"{unit}.service"), unit
    for other in (
        "sshd.service",
        "slurmd.socket",
        "xslurmd.service",
        "slurmdXservice",
        "munge.service.d",
        "cron.service",
    ):
        assert not matcher.match(other), other


def test_every_unit_the_contract_names_is_reported() -> None:
    section = (DOCS / "monitoring.md").read_text().split("## systemd units", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`([a-z0-9-]+)`", section)
    assert "slurmd" in named and "nvidia-dcgm" in named
    matcher = unit_matcher(flags())
    assert [unit for unit in named if not matcher.match(f"{unit}.service")] == []


def test_the_gpu_metrics_dcgm_exporter_unit_is_reported_too() -> None:
    gpu_metrics = yaml.safe_load((ROLES / "gpu_metrics" / "defaults" / "main.yml").read_text())
    matcher = unit_matcher(flags())
    assert matcher.match(gpu_metrics["gpu_metrics_dcgm_exporter_service"] + ".service")
    assert matcher.match(gpu_metrics["gpu_metrics_dcgm_hostengine_service"] + ".service")


def test_a_unit_name_with_a_dot_matches_only_itself() -> None:
    matcher = unit_matcher(flags(node_exporter_systemd_units=["a.b", "getty@tty1"]))
    assert matcher.match("a.b.service")
    assert matcher.match("getty@tty1.service")
    assert not matcher.match("aXb.service")


def test_no_units_switch_the_systemd_collector_off() -> None:
    arguments = flags(node_exporter_systemd_units=[])
    assert "--no-collector.systemd" in arguments
    assert not any(argument.startswith("--collector.systemd") for argument in arguments)


def test_switching_systemd_off_by_name_wins_once() -> None:
    arguments = flags(node_exporter_disabled_collectors=["systemd", "hwmon"])
    assert arguments.count("--no-collector.systemd") == 1
    assert not any(argument.startswith("--collector.systemd") for argument in arguments)


def test_the_flags_keep_their_order() -> None:
    arguments = flags(node_exporter_extra_args=["--log.level=debug"])
    assert arguments[:3] == [
        "--web.listen-address=:9100",
        f"--collector.textfile.directory={TEXTFILE_DIR}",
        "--collector.systemd",
    ]
    assert arguments[-1] == "--log.level=debug"


def test_in_a_container_the_hardware_collectors_are_off_and_systemd_is_on() -> None:
    arguments = flags(node_exporter_in_container=True)
    assert "--no-collector.hwmon" in arguments
    assert "--collector.systemd" in arguments


# --- preflight ----------------------------------------------------------------------------------------------


def failing(**extra: Any) -> list[str]:
    tasks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
    asserts = [task for task in tasks if "ansible.builtin.assert" in task]
    variables = role_variables("node_exporter", inventory(), "gpu01", extra)
    return first_refusal(Templar(loader=DataLoader(), variables=variables), asserts)


def test_the_defaults_pass_preflight() -> None:
    assert failing() == []


@pytest.mark.parametrize(
    "change",
    [
        {"node_exporter_systemd_units": ["slurmd.service"]},
        {"node_exporter_systemd_units": ["slurm.*"]},
        {"node_exporter_systemd_units": ["a|b"]},
        {"node_exporter_systemd_units": ["slurmd --web.listen-address=:1"]},
        {"node_exporter_systemd_units": ['x"']},
        {"node_exporter_systemd_units": ["x\\y"]},
        {"node_exporter_systemd_units": "slurmd"},
        {"node_exporter_textfile_dir": "relative"},
        {"node_exporter_textfile_dir": "/var/lib/x y"},
        {"node_exporter_textfile_dir": '/var/lib/x" --web.listen-address=:1'},
    ],
)
def test_inputs_that_would_break_the_flags_fail_preflight(change: dict[str, Any]) -> None:
    [message] = failing(**change)
    assert "node_exporter_textfile_dir must be" in message


# --- the documentation agrees with the defaults ---------------------------------------------------------------


def test_argument_specs_and_readme_carry_the_new_variables() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    readme = (ROLE / "README.md").read_text()
    for name in ("node_exporter_textfile_dir", "node_exporter_systemd_units"):
        assert specs[name]["default"] == defaults[name], name
        assert f"| `{name}` |" in readme, name
    assert "[" + ", ".join(defaults["node_exporter_systemd_units"]) + "]" in readme
