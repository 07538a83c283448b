"""Role gpu_metrics without a node: the source each node gets, the files it wants, and what they say.

The role's decisions and templates are rendered with Ansible's own templating
from its defaults and vars over gpuclus' rendered group_vars
(tests/unit/role_templates.py). The dcgm-exporter path cannot run on the CI
host (no GPU, NVIDIA's repository unreachable): its unit drop-in and counters
CSV are checked here as text. The Slurm prolog and epilog are rendered and
then run for real with /bin/sh on files in tmp_path.
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
from role_templates import ROLES, first_refusal, group_vars, render, role_variables
from test_gpu_metrics_collector import contract_metrics

from gpuclus.render import render_files
from gpuclus.spec.load import load_spec_text

SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: admin}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, monitoring]}
  - {name: real01, address: 10.0.0.11, roles: [compute], gpus: {count: 2, model: h100}, cpus: 8, memory_mb: 16000}
  - {name: fake01, address: 10.0.0.12, roles: [compute], gpus: {count: 2, fake: true}, cpus: 8, memory_mb: 16000}
monitoring: {prometheus: true}
nvidia: {driver: {install: false}, cuda: {install: false}, dcgm: DCGM}
"""
# The SHA-1 of each template is a lookup on the control machine; stood in for here.
SHA1 = {
    "textfile": "0" * 40,
    "collector": "0" * 40,
    "collector_unit": "0" * 40,
    "timer": "0" * 40,
    "dropin": "0" * 40,
    "own_unit": "0" * 40,
    "counters": "0" * 40,
    "tmpfiles": "0" * 40,
    "prolog": "1" * 40,
    "epilog": "2" * 40,
}
REASON = "fake GPUs: device nodes without a driver (sandbox)"


def inventory(dcgm: bool) -> dict[str, Any]:
    loaded = load_spec_text(SPEC.replace("DCGM", "true" if dcgm else "false"))
    assert loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    return group_vars(files)


def templar(host: str, *, dcgm: bool = False, **extra: Any) -> Templar:
    variables = role_variables("gpu_metrics", inventory(dcgm), host, {"__gpu_metrics_sha1": SHA1, **extra})
    variables["ansible_facts"]["os_family"] = "Debian"
    return Templar(loader=DataLoader(), variables=variables)


def value(t: Templar, expression: str) -> Any:
    return t.template(trust_as_template("{{ " + expression + " }}"))


def template(host: str, name: str, *, dcgm: bool = False, **extra: Any) -> str:
    return render("gpu_metrics", name, inventory(dcgm), host, __gpu_metrics_sha1=SHA1, **extra)


# --- which source, which files ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "dcgm", "source"),
    [("fake01", False, "none"), ("fake01", True, "none"), ("real01", False, "nvidia-smi"), ("real01", True, "dcgm")],
)
def test_each_node_gets_its_source_from_the_spec(host: str, dcgm: bool, source: str) -> None:
    assert value(templar(host, dcgm=dcgm), "__gpu_metrics_source") == source


def wanted(t: Templar) -> dict[str, dict[str, Any]]:
    return {item["path"]: item for item in value(t, "__gpu_metrics_wanted_files")}


def leftovers(t: Templar) -> set[str]:
    return {item["path"] for item in value(t, "__gpu_metrics_leftover_files")}


COLLECTOR = {
    "/usr/local/libexec/gpuclus",
    "/usr/local/libexec/gpuclus/gpu-metrics",
    "/etc/systemd/system/gpuclus-gpu-metrics.service",
    "/etc/systemd/system/gpuclus-gpu-metrics.timer",
}
DCGM = {
    "/etc/systemd/system/nvidia-dcgm-exporter.service.d",
    "/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuclus.conf",
    "/etc/dcgm-exporter",
    "/etc/dcgm-exporter/gpuclus-counters.csv",
}
MAPPING = {
    "/run/gpuclus/gpu-jobs",
    "/etc/tmpfiles.d/gpuclus-gpu-jobs.conf",
    "/etc/slurm/prolog.d",
    "/etc/slurm/prolog.d/gpuclus-gpu-jobs",
    "/etc/slurm/epilog.d",
    "/etc/slurm/epilog.d/gpuclus-gpu-jobs",
}
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"


def test_fake_gpus_get_nothing_but_the_recorded_reason() -> None:
    t = templar("fake01", dcgm=True)
    assert set(wanted(t)) == {TEXTFILE_DIR, f"{TEXTFILE_DIR}/gpu.prom"}
    assert wanted(t)[f"{TEXTFILE_DIR}/gpu.prom"] | {"checksum": None} == {
        "path": f"{TEXTFILE_DIR}/gpu.prom",
        "checksum": None,
        "owner": "root",
        "group": "root",
        "mode": "0644",
    }
    # What a real-GPU source would have left goes; directories stay.
    assert leftovers(t) == {
        "/usr/local/libexec/gpuclus/gpu-metrics",
        "/etc/systemd/system/gpuclus-gpu-metrics.service",
        "/etc/systemd/system/gpuclus-gpu-metrics.timer",
        "/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuclus.conf",
        "/etc/dcgm-exporter/gpuclus-counters.csv",
        "/etc/tmpfiles.d/gpuclus-gpu-jobs.conf",
        "/etc/slurm/prolog.d/gpuclus-gpu-jobs",
        "/etc/slurm/epilog.d/gpuclus-gpu-jobs",
    }
    assert value(t, "__gpu_metrics_units") == []
    assert value(t, "__gpu_metrics_packages") == []


def test_real_gpus_without_dcgm_get_the_collector_and_the_job_mapping() -> None:
    t = templar("real01")
    assert set(wanted(t)) == {TEXTFILE_DIR} | COLLECTOR | MAPPING
    assert wanted(t)["/usr/local/libexec/gpuclus/gpu-metrics"]["mode"] == "0755"
    assert wanted(t)["/etc/slurm/prolog.d/gpuclus-gpu-jobs"]["mode"] == "0755"
    assert leftovers(t) == {
        "/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuclus.conf",
        "/etc/dcgm-exporter/gpuclus-counters.csv",
    }
    assert value(t, "__gpu_metrics_units") == ["gpuclus-gpu-metrics.timer"]
    assert value(t, "__gpu_metrics_packages") == []


def test_real_gpus_with_dcgm_get_dcgm_exporter_and_the_job_mapping() -> None:
    t = templar("real01", dcgm=True)
    assert set(wanted(t)) == {TEXTFILE_DIR, f"{TEXTFILE_DIR}/gpu.prom"} | DCGM | MAPPING
    assert leftovers(t) == COLLECTOR - {"/usr/local/libexec/gpuclus"}
    assert value(t, "__gpu_metrics_units") == ["nvidia-dcgm-exporter.service"]
    assert value(t, "__gpu_metrics_packages") == ["datacenter-gpu-manager-exporter"]


def test_without_slurm_hooks_the_prolog_and_epilog_go() -> None:
    t = templar("real01", gpu_metrics_slurm_hooks=False)
    assert not {"/etc/slurm/prolog.d/gpuclus-gpu-jobs", "/etc/slurm/epilog.d/gpuclus-gpu-jobs"} & set(wanted(t))
    assert {"/etc/slurm/prolog.d/gpuclus-gpu-jobs", "/etc/slurm/epilog.d/gpuclus-gpu-jobs"} <= leftovers(t)


# --- what the files say -----------------------------------------------------------------------------------


def info_line(text: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith("gpuclus_gpu_metrics_info")]
    return line


def test_the_fake_gpu_record_names_the_reason() -> None:
    text = template("fake01", "var/lib/prometheus/node-exporter/gpu.prom.j2")
    assert info_line(text) == f'gpuclus_gpu_metrics_info{{source="none",reason="{REASON}"}} 1'
    assert "# TYPE gpuclus_gpu_metrics_info gauge" in text


def test_a_reason_with_quotes_is_escaped() -> None:
    text = template("fake01", "var/lib/prometheus/node-exporter/gpu.prom.j2", gpu_metrics_fake_reason='a "b" \\ c\nd')
    assert info_line(text) == 'gpuclus_gpu_metrics_info{source="none",reason="a \\"b\\" \\\\ c\\nd"} 1'


def test_dcgm_nodes_record_their_source() -> None:
    text = template("real01", "var/lib/prometheus/node-exporter/gpu.prom.j2", dcgm=True)
    assert info_line(text) == 'gpuclus_gpu_metrics_info{source="dcgm"} 1'


def test_dcgm_exporter_collects_every_field_the_contract_names() -> None:
    text = template("real01", "etc/dcgm-exporter/gpuclus-counters.csv.j2", dcgm=True)
    rows = [
        [cell.strip() for cell in line.split(",")] for line in text.splitlines() if line and not line.startswith("#")
    ]
    assert all(len(row) == 3 and row[1] in ("gauge", "counter") and row[2] for row in rows), rows
    fields = [row[0] for row in rows]
    assert set(contract_metrics()) <= set(fields)
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in fields  # commented out in dcgm-exporter's own default CSV
    assert len(fields) == len(set(fields))


def test_extra_dcgm_fields_are_added() -> None:
    extra = [{"field": "DCGM_FI_DEV_SM_CLOCK", "type": "gauge", "help": "SM clock (in MHz)."}]
    text = template(
        "real01", "etc/dcgm-exporter/gpuclus-counters.csv.j2", dcgm=True, gpu_metrics_dcgm_extra_counters=extra
    )
    assert text.splitlines()[-1] == "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock (in MHz)."


def exec_start(unit: str) -> str:
    starts = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart=")]
    return starts[-1]


def test_dcgm_exporter_runs_with_the_job_mapping_on_port_9400() -> None:
    unit = template("real01", "etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuclus.conf.j2", dcgm=True)
    assert "ExecStart=\n" in unit  # the package's command line is replaced, not added to
    assert exec_start(unit) == (
        "/usr/bin/dcgm-exporter --collectors /etc/dcgm-exporter/gpuclus-counters.csv --address :9400"
        " --collect-interval 15000 --hpc-job-mapping-dir /run/gpuclus/gpu-jobs --remote-hostengine-info localhost:5555"
    )
    assert "After=nvidia-dcgm.service" in unit.splitlines()


def test_dcgm_exporter_with_its_embedded_host_engine() -> None:
    unit = template(
        "real01",
        "etc/systemd/system/nvidia-dcgm-exporter.service.d/gpuclus.conf.j2",
        dcgm=True,
        gpu_metrics_dcgm_hostengine=None,
        gpu_metrics_dcgm_exporter_port=9500,
    )
    assert "--remote-hostengine-info" not in unit
    assert "nvidia-dcgm.service" not in unit
    assert " --address :9500 " in exec_start(unit)


def test_the_collector_runs_every_interval_and_may_write_only_the_textfile_directory() -> None:
    service = template("real01", "etc/systemd/system/gpuclus-gpu-metrics.service.j2")
    timer = template("real01", "etc/systemd/system/gpuclus-gpu-metrics.timer.j2", gpu_metrics_interval=30)
    assert exec_start(service) == (
        "/usr/local/libexec/gpuclus/gpu-metrics --textfile-dir /var/lib/prometheus/node-exporter"
        " --job-dir /run/gpuclus/gpu-jobs"
    )
    assert "Type=oneshot" in service.splitlines()
    assert "ReadWritePaths=/var/lib/prometheus/node-exporter" in service.splitlines()
    assert {"OnUnitActiveSec=30s", "AccuracySec=1s", "WantedBy=timers.target"} <= set(timer.splitlines())


# --- the prolog and epilog, run -----------------------------------------------------------------------------


def hook(kind: str, job_dir: Path, tmp_path: Path) -> Path:
    text = template("real01", f"etc/slurm/{kind}.d/gpuclus-gpu-jobs.j2", gpu_metrics_job_dir=str(job_dir))
    script = tmp_path / f"{kind}-gpuclus-gpu-jobs"
    script.write_text(text)
    script.chmod(0o755)
    return script


def slurm(script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # slurmd gives a hook no PATH, only the job's variables.
    return subprocess.run([str(script)], env=env, capture_output=True, text=True, check=False, timeout=30)


def mapping(job_dir: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(job_dir.iterdir())} if job_dir.exists() else {}


def test_the_prolog_writes_the_job_id_for_each_gpu_of_the_job(tmp_path: Path) -> None:
    job_dir = tmp_path / "run" / "gpu-jobs"
    done = slurm(hook("prolog", job_dir, tmp_path), SLURM_JOB_ID="4242", SLURM_JOB_GPUS="0,2")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert mapping(job_dir) == {"0": "4242\n", "2": "4242\n"}


def test_the_prolog_reads_ranges_too(tmp_path: Path) -> None:
    job_dir = tmp_path / "gpu-jobs"
    assert slurm(hook("prolog", job_dir, tmp_path), SLURM_JOB_ID="7", SLURM_JOB_GPUS="1-3,6").returncode == 0
    assert mapping(job_dir) == {"1": "7\n", "2": "7\n", "3": "7\n", "6": "7\n"}


@pytest.mark.parametrize(
    "env",
    [
        {"SLURM_JOB_ID": "9"},  # a job without GPUs
        {"SLURM_JOB_GPUS": "0"},  # no job id
        {"SLURM_JOB_ID": "9;touch x", "SLURM_JOB_GPUS": "0"},
        {"SLURM_JOB_ID": "9", "SLURM_JOB_GPUS": "../x,a"},
    ],
)
def test_the_prolog_writes_nothing_for_what_is_not_a_job_with_gpus_and_still_succeeds(
    tmp_path: Path, env: dict[str, str]
) -> None:
    job_dir = tmp_path / "gpu-jobs"
    job_dir.mkdir()
    done = slurm(hook("prolog", job_dir, tmp_path), **env)
    assert done.returncode == 0
    assert mapping(job_dir) == {}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["gpu-jobs", "prolog-gpuclus-gpu-jobs"]


def test_the_prolog_never_fails_a_job_even_when_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "gpu-jobs"
    blocker.write_text("a file where the directory should be\n")
    done = slurm(hook("prolog", blocker, tmp_path), SLURM_JOB_ID="5", SLURM_JOB_GPUS="0")
    assert (done.returncode, done.stdout) == (0, "")
    assert blocker.read_text().startswith("a file")


def test_the_epilog_removes_the_jobs_files_only(tmp_path: Path) -> None:
    job_dir = tmp_path / "gpu-jobs"
    job_dir.mkdir()
    (job_dir / "0").write_text("4242\n")
    (job_dir / "1").write_text("4243\n")  # another job's GPU
    (job_dir / "2").write_text("4242")  # no final newline
    (job_dir / "README").write_text("4242\n")  # not a GPU index
    done = slurm(hook("epilog", job_dir, tmp_path), SLURM_JOB_ID="4242", SLURM_JOB_GPUS="0,2")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert mapping(job_dir) == {"1": "4243\n", "README": "4242\n"}


def test_the_epilog_succeeds_without_a_mapping_directory(tmp_path: Path) -> None:
    assert slurm(hook("epilog", tmp_path / "absent", tmp_path), SLURM_JOB_ID="1").returncode == 0


def test_prolog_then_epilog_leave_nothing(tmp_path: Path) -> None:
    job_dir = tmp_path / "gpu-jobs"
    env = {"SLURM_JOB_ID": "31", "SLURM_JOB_GPUS": "0,1"}
    assert slurm(hook("prolog", job_dir, tmp_path), **env).returncode == 0
    assert set(mapping(job_dir)) == {"0", "1"}
    assert slurm(hook("epilog", job_dir, tmp_path), **env).returncode == 0
    assert mapping(job_dir) == {}


# --- preflight --------------------------------------------------------------------------------------------


def failing(**extra: Any) -> list[str]:
    """The fail_msg of the first preflight assert that refuses these inputs ([] when none does)."""
    tasks = yaml.safe_load((ROLES / "gpu_metrics" / "tasks" / "preflight.yml").read_text())
    asserts = [task for task in tasks if "ansible.builtin.assert" in task]
    return first_refusal(templar("real01", **extra), asserts)


def test_the_defaults_pass_preflight() -> None:
    assert failing() == []


@pytest.mark.parametrize(
    "change",
    [
        {"gpu_metrics_job_dir": "/run/x; rm -rf /"},
        {"gpu_metrics_textfile_dir": "relative/dir"},
        {"gpu_metrics_prolog_dir": "/etc/slurm/prolog.d\nexit 1"},
        {"gpu_metrics_interval": 0},
        {"gpu_metrics_interval": "15s"},
        {"gpu_metrics_dcgm_exporter_port": 70000},
        {"gpu_metrics_dcgm_hostengine": "localhost:5555 --debug"},
        {"gpu_metrics_fake_reason": "tab\there"},
        {"gpu_metrics_dcgm": True, "gpu_metrics_dcgm_exporter_package": "/nonexistent/dcgm-exporter.deb"},
        {"gpu_metrics_dcgm_extra_counters": [{"field": "DCGM_FI_X", "type": "gauge", "help": "a, b"}]},
    ],
)
def test_inputs_that_would_break_a_script_or_unit_fail_preflight(change: dict[str, Any]) -> None:
    assert failing(**change)


def test_the_role_files_exist() -> None:
    base = ROLES / "gpu_metrics"
    for name in ("README.md", "defaults/main.yml", "meta/argument_specs.yml", "files/gpu_metrics.py"):
        assert (base / name).is_file(), name
    assert re.search(r"^#!/usr/bin/python3$", (base / "files" / "gpu_metrics.py").read_text(), re.MULTILINE)


def test_the_specs_exporter_package_is_read_next_to_the_inventory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "inventory").mkdir(parents=True)
    relative = templar(
        "real01",
        dcgm=True,
        gpuclus_dcgm_exporter_package="../pkgs/datacenter-gpu-manager-exporter_4.1.1-1_amd64.deb",
        inventory_dir=str(out / "inventory"),
    )
    wanted_file = tmp_path / "pkgs" / "datacenter-gpu-manager-exporter_4.1.1-1_amd64.deb"
    assert value(relative, "gpu_metrics_dcgm_exporter_package") == str(wanted_file)
    absolute = templar("real01", dcgm=True, gpuclus_dcgm_exporter_package="/srv/exporter.deb")
    assert value(absolute, "gpu_metrics_dcgm_exporter_package") == "/srv/exporter.deb"
    assert value(templar("real01", dcgm=True), "gpu_metrics_dcgm_exporter_package") is None
