"""Role slurm_metrics without a node: its units, what it probes, what its preflight refuses, its documentation.

The role's templates and variables are rendered with Ansible's own templating
from its defaults and vars over gpuclus' rendered group_vars
(tests/unit/role_templates.py). The collector itself is tested in
test_slurm_metrics_collector.py; the role on a real controller in the
monitoring integration tests.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
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
# The SHA-1s are lookups on the control machine; stood in for here.
SHA1 = {"collector": "1" * 40, "service": "2" * 40, "timer": "3" * 40}
ROLE = ROLES / "slurm_metrics"


def inventory() -> dict[str, Any]:
    loaded = load_spec_text(SPEC)
    assert loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    return group_vars(files)


def templar(host: str = "head", **extra: Any) -> Templar:
    return Templar(
        loader=DataLoader(),
        variables=role_variables("slurm_metrics", inventory(), host, {"__slurm_metrics_sha1": SHA1, **extra}),
    )


def value(t: Templar, expression: str) -> Any:
    return t.template(trust_as_template("{{ " + expression + " }}"))


def template(name: str, **extra: Any) -> str:
    return render("slurm_metrics", f"etc/systemd/system/{name}.j2", inventory(), "head", **extra)


def unit_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


# --- the units ----------------------------------------------------------------------------------------------


def test_the_service_runs_the_collector_once_and_may_write_only_the_textfile_directory() -> None:
    service = unit_lines(template("gpuclus-slurm-metrics.service"))
    assert (
        "ExecStart=/usr/local/libexec/gpuclus/slurm-metrics --output /var/lib/prometheus/node-exporter/slurm.prom"
        " --timeout 20" in service
    )
    assert "Type=oneshot" in service
    # Four commands, each up to the timeout, and some slack.
    assert "TimeoutStartSec=110" in service
    assert {"ProtectSystem=strict", "ProtectHome=yes", "NoNewPrivileges=yes"} <= set(service)
    assert "ReadWritePaths=/var/lib/prometheus/node-exporter" in service
    assert not any(line.startswith(("User=", "WantedBy=")) for line in service), "run by the timer, as root"


def test_the_timer_fires_every_interval_with_a_one_second_accuracy() -> None:
    timer = unit_lines(template("gpuclus-slurm-metrics.timer"))
    assert {"OnActiveSec=1s", "OnUnitActiveSec=30s", "AccuracySec=1s", "WantedBy=timers.target"} <= set(timer)
    faster = unit_lines(template("gpuclus-slurm-metrics.timer", slurm_metrics_interval=10))
    assert "OnUnitActiveSec=10s" in faster


def test_the_service_follows_the_variables() -> None:
    service = unit_lines(
        template(
            "gpuclus-slurm-metrics.service",
            slurm_metrics_textfile_dir="/srv/textfiles",
            slurm_metrics_collector_path="/opt/gpuclus/bin/slurm-metrics",
            slurm_metrics_command_timeout=5,
        )
    )
    assert "ExecStart=/opt/gpuclus/bin/slurm-metrics --output /srv/textfiles/slurm.prom --timeout 5" in service
    assert "ReadWritePaths=/srv/textfiles" in service
    assert "TimeoutStartSec=50" in service


# --- what the role probes -----------------------------------------------------------------------------------


def test_the_probe_covers_the_script_units_directories_and_output() -> None:
    files = {item["path"]: item for item in value(templar(), "__slurm_metrics_probe_files")}
    assert files == {
        "/usr/local/libexec/gpuclus": {
            "path": "/usr/local/libexec/gpuclus",
            "state": "directory",
            "owner": "root",
            "group": "root",
            "mode": "0755",
        },
        "/usr/local/libexec/gpuclus/slurm-metrics": {
            "path": "/usr/local/libexec/gpuclus/slurm-metrics",
            "checksum": SHA1["collector"],
            "owner": "root",
            "group": "root",
            "mode": "0755",
        },
        "/etc/systemd/system/gpuclus-slurm-metrics.service": {
            "path": "/etc/systemd/system/gpuclus-slurm-metrics.service",
            "checksum": SHA1["service"],
            "owner": "root",
            "group": "root",
            "mode": "0644",
        },
        "/etc/systemd/system/gpuclus-slurm-metrics.timer": {
            "path": "/etc/systemd/system/gpuclus-slurm-metrics.timer",
            "checksum": SHA1["timer"],
            "owner": "root",
            "group": "root",
            "mode": "0644",
        },
        # Only has to exist: the exporter's package owns it.
        "/var/lib/prometheus/node-exporter": {"path": "/var/lib/prometheus/node-exporter", "state": "directory"},
        "/var/lib/prometheus/node-exporter/slurm.prom": {"path": "/var/lib/prometheus/node-exporter/slurm.prom"},
    }


def test_each_step_handles_the_probe_paths_it_is_included_for() -> None:
    """Every stale path leads to a step whose tasks act on it (a stale path no step handles loops forever)."""
    main = (ROLE / "tasks" / "main.yml").read_text()
    for name in ("__slurm_metrics_collector_dir", "slurm_metrics_collector_path", "slurm_metrics_textfile_dir"):
        assert f"{name} in __slurm_metrics_probe.stale.files" in (ROLE / "tasks" / "install.yml").read_text()
        assert f"{name} in __slurm_metrics_probe.stale.files" in main
    for name in ("__slurm_metrics_service_path", "__slurm_metrics_timer_path"):
        assert f"{name} in __slurm_metrics_probe.stale.files" in (ROLE / "tasks" / "configure.yml").read_text()
        assert f"{name} in __slurm_metrics_probe.stale.files" in main
    # slurm.prom (and anything else) stale: the service step runs one collection.
    assert "__slurm_metrics_probe.stale.files | length > 0" in main
    service = yaml.safe_load((ROLE / "tasks" / "service.yml").read_text())
    assert [task["name"] for task in service][-1] == "Collect the Slurm metrics once"


# --- preflight ----------------------------------------------------------------------------------------------


def failing(host: str = "head", **extra: Any) -> list[str]:
    tasks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
    asserts = [task for task in tasks if "ansible.builtin.assert" in task]
    return first_refusal(templar(host, **extra), asserts)


def test_the_defaults_pass_preflight_on_the_controller() -> None:
    assert failing() == []


def test_preflight_refuses_a_node_other_than_the_controller() -> None:
    [message] = failing("gpu01")
    assert "gpu01 runs the slurm_metrics role but gpuclus_controller is head" in message


@pytest.mark.parametrize(
    "change",
    [
        {"slurm_metrics_interval": 0},
        {"slurm_metrics_interval": 4},
        {"slurm_metrics_interval": "30s"},
        {"slurm_metrics_interval": 7200},
        {"slurm_metrics_command_timeout": 0},
        {"slurm_metrics_command_timeout": "20 --stdout"},
        {"slurm_metrics_textfile_dir": "relative/dir"},
        {"slurm_metrics_textfile_dir": "/var/lib/node exporter"},
        {"slurm_metrics_textfile_dir": "/var/lib/x\nExecStartPre=/bin/false"},
        {"slurm_metrics_collector_path": "/slurm-metrics"},
        {"slurm_metrics_collector_path": "/usr/local/bin/slurm-metrics;reboot"},
    ],
)
def test_inputs_that_would_break_the_units_fail_preflight(change: dict[str, Any]) -> None:
    [message] = failing(**change)
    assert "slurm_metrics inputs" in message


# --- the documentation agrees with the defaults ---------------------------------------------------------------


def defaults() -> dict[str, Any]:
    loaded = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_argument_specs_describe_every_default_with_its_value() -> None:
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert set(specs) == set(defaults())
    for name, default in defaults().items():
        assert specs[name]["default"] == default, name


def test_the_readme_lists_every_variable() -> None:
    readme = (ROLE / "README.md").read_text()
    for name, default in defaults().items():
        assert re.search(rf"^\| `{name}` \| `{re.escape(str(default))}` \|", readme, re.MULTILINE), name


def test_the_textfile_directory_is_the_one_the_node_exporter_reads() -> None:
    exporter = yaml.safe_load((ROLES / "node_exporter" / "defaults" / "main.yml").read_text())
    assert defaults()["slurm_metrics_textfile_dir"] == exporter["node_exporter_textfile_dir"]


def test_the_role_files_exist() -> None:
    for name in (
        "README.md",
        "defaults/main.yml",
        "meta/main.yml",
        "meta/argument_specs.yml",
        "vars/Debian.yml",
        "vars/RedHat.yml",
        "handlers/main.yml",
        "files/slurm_metrics.py",
    ):
        assert (ROLE / name).is_file(), name
    script = (ROLE / "files" / "slurm_metrics.py").read_text()
    assert script.startswith("#!/usr/bin/python3\n")
    imports = re.findall(r"^(?:from|import) ([a-z_.]+)", script, re.MULTILINE)
    stdlib = {"__future__", "argparse", "contextlib", "os", "re", "subprocess", "sys", "tempfile", "time"}
    stdlib |= {"collections.abc", "dataclasses", "pathlib"}
    assert set(imports) <= stdlib, "the standard library only: the node's python3 runs it"
