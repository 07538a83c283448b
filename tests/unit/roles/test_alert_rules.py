"""gpuclus' alert rules, as the prometheus role writes them, under Prometheus' own promtool.

The rules file is a template of roles/prometheus (thresholds, the controller,
the NFS server, exports and clients come from the inventory). Each test
renders it the way the role does (tests/unit/role_templates.py: the role's
defaults and vars, Ansible's templating) from what gpuclus renders for a spec:

- a cluster with kernel NFS, whose clients mount the exports (so the
  NfsMountMissing rule and the clients' view of the shared storage exist),
  real GPUs with dcgm-exporter, and Alertmanager;
- a sandbox-like cluster: nfs-ganesha (nothing is mounted), fake GPUs.

Then `promtool check rules` must accept the file and `promtool test rules`
must pass the cases under tests/promtool/ (synthetic series in, the alerts
with their labels and annotations out). Every alert rule of the rendered file
needs a case where it fires and one where it does not: a new rule without
cases fails here. promtool is Debian's (tests/prometheus_tools.py).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, group_vars, render, role_variables

from gpuclus.render import render_files
from gpuclus.spec.load import load_spec_text
from prometheus_tools import require

CASES = Path(__file__).resolve().parents[2] / "promtool"
RULES_TEMPLATE = "etc/prometheus/rules/gpuclus.rules.yml.j2"
RULES_FILE = "gpuclus.rules.yml"  # the name tests/promtool/*.yml give in rule_files

KERNEL_NFS = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: admin}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, nfs_server, monitoring, login]}
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 2}}
nfs:
  exports: [/home, {path: /srv/nfs/shared, mount: /shared}]
nvidia: {dcgm: true}
monitoring: {prometheus: true, alertmanager: true}
"""

GANESHA_NFS = """\
apiVersion: gpuclus/v1
cluster: {name: sbx, admin_user: admin}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, nfs_server, monitoring, login]}
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 2, fake: true}}
nfs:
  server_impl: ganesha
  exports: [{path: /srv/nfs/shared, mount: /shared}]
nvidia: {driver: {install: false}, cuda: {install: false}}
monitoring: {prometheus: true}
"""

# Inventory -> (spec, the case files that hold for it).
CLUSTERS = {
    "kernel-nfs": (KERNEL_NFS, ("common.yml", "nfs_kernel.yml")),
    "ganesha-nfs": (GANESHA_NFS, ("common.yml", "nfs_ganesha.yml")),
}


@dataclass(frozen=True)
class Rendered:
    name: str
    inventory: dict[str, Any]
    directory: Path  # the rendered rules file and copies of its case files
    cases: tuple[str, ...]

    @property
    def rules_path(self) -> Path:
        return self.directory / RULES_FILE

    def rules(self) -> dict[str, Any]:
        loaded = yaml.safe_load(self.rules_path.read_text())
        assert isinstance(loaded, dict)
        return loaded


def inventory_for(spec: str) -> dict[str, Any]:
    loaded = load_spec_text(spec)
    assert loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    return group_vars(files)


def render_rules(inventory: dict[str, Any], **extra: Any) -> str:
    """The rules file the prometheus role writes on the monitoring node (head)."""
    return render("prometheus", RULES_TEMPLATE, inventory, inventory["gpuclus_monitoring_server"], **extra)


@pytest.fixture(scope="module", params=sorted(CLUSTERS))
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    name = str(request.param)
    spec, cases = CLUSTERS[name]
    inventory = inventory_for(spec)
    directory = tmp_path_factory.mktemp(name)
    (directory / RULES_FILE).write_text(render_rules(inventory))
    for case in cases:
        shutil.copy(CASES / case, directory / case)
    return Rendered(name, inventory, directory, cases)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(require("promtool")), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_accepts_the_rules(rendered: Rendered) -> None:
    result = promtool("check", "rules", RULES_FILE, cwd=rendered.directory)
    assert result.returncode == 0, f"{rendered.name}:\n{result.stdout}{result.stderr}"
    assert "SUCCESS" in result.stdout


def test_every_alert_does_what_its_cases_say(rendered: Rendered) -> None:
    result = promtool("test", "rules", *rendered.cases, cwd=rendered.directory)
    assert result.returncode == 0, f"{rendered.name}:\n{result.stdout}{result.stderr}"


def _alert_rules(rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def _expectations(rendered: Rendered) -> list[tuple[str, list[dict[str, str]]]]:
    """(alertname, the exp_labels of each expected alert) of every alert_rule_test of the case files."""
    found = []
    for case in rendered.cases:
        document = yaml.safe_load((CASES / case).read_text())
        assert document["rule_files"] == [RULES_FILE], case
        for test in document["tests"]:
            for check in test.get("alert_rule_test", []):
                expected = [dict(alert.get("exp_labels") or {}) for alert in check.get("exp_alerts") or []]
                found.append((str(check["alertname"]), expected))
    return found


def test_every_alert_rule_has_a_case_where_it_fires_and_one_where_it_does_not(rendered: Rendered) -> None:
    expectations = _expectations(rendered)
    missing = []
    for rule in _alert_rules(rendered.rules()):
        name = rule["alert"]
        # A rule is told from another of the same name by its own labels (GpuEccErrors: ecc).
        labels = {key: str(value) for key, value in (rule.get("labels") or {}).items()}
        fires = any(
            alertname == name and any(labels.items() <= alert.items() for alert in alerts)
            for alertname, alerts in expectations
        )
        quiet = any(alertname == name and not alerts for alertname, alerts in expectations)
        if not fires:
            missing.append(f"{name} {labels}: no case where it fires")
        if not quiet:
            missing.append(f"{name}: no case where it stays quiet")
    assert not missing, f"{rendered.name}: " + "; ".join(missing)


def test_every_alert_has_for_severity_summary_and_description(rendered: Rendered) -> None:
    for rule in _alert_rules(rendered.rules()):
        assert rule.get("for"), rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]


def test_the_rules_match_the_clusters_nfs(rendered: Rendered) -> None:
    alerts = _alert_rules(rendered.rules())
    names = [rule["alert"] for rule in alerts]
    views = sorted(rule["labels"].get("seen_from") for rule in alerts if rule["alert"] == "SharedStorageNearlyFull")
    if rendered.name == "kernel-nfs":
        # Kernel NFS: the clients mount the exports, so a missing mount is an alert.
        assert names.count("NfsMountMissing") == 1
        assert views == ["nfs_client", "nfs_server"]
        expr = next(rule["expr"] for rule in alerts if rule["alert"] == "NfsMountMissing")
        assert 'instance=~"gpu01|gpu02"' in expr
        assert '"head:/home"' in expr and '"head:/srv/nfs/shared"' in expr
    else:
        # nfs-ganesha (the sandbox): nothing is mounted anywhere.
        assert "NfsMountMissing" not in names
        assert views == ["nfs_server"]


def test_the_thresholds_are_variables() -> None:
    inventory = inventory_for(KERNEL_NFS)
    text = render_rules(
        inventory,
        prometheus_alert_gpu_temperature_celsius=78,
        prometheus_alert_disk_free_percent=15,
        prometheus_alert_shared_storage_free_percent=5,
        prometheus_alert_gpu_ecc_sbe_per_hour=30,
        prometheus_alert_slurm_collector_max_age=600,
    )
    exprs = {
        (rule["alert"], rule["labels"].get("ecc") or rule["labels"].get("seen_from")): rule["expr"]
        for rule in _alert_rules(yaml.safe_load(text))
    }
    assert exprs[("GpuTemperatureHigh", None)] == "DCGM_FI_DEV_GPU_TEMP > 78"
    assert "< 15\n" in exprs[("DiskNearlyFull", None)]
    assert "< 5\n" in exprs[("SharedStorageNearlyFull", "nfs_server")]
    assert exprs[("GpuEccErrors", "single_bit")].endswith("* 3600 > 30")
    assert "> 600," in exprs[("SlurmctldDown", None)]


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"prometheus_nfs_server": ""}, id="no-nfs"),
        pytest.param({"prometheus_slurm_controller": ""}, id="no-controller"),
        pytest.param({"prometheus_nfs_clients": ["gpu.01", "gpu-02"]}, id="dotted-names"),
    ],
)
def test_rules_without_parts_of_the_cluster_stay_valid(extra: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / RULES_FILE).write_text(render_rules(inventory_for(KERNEL_NFS), **extra))
    result = promtool("check", "rules", RULES_FILE, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    names = [rule["alert"] for rule in _alert_rules(yaml.safe_load((tmp_path / RULES_FILE).read_text()))]
    if extra.get("prometheus_nfs_server") == "":
        assert not {"SharedStorageNearlyFull", "NfsMountMissing"} & set(names)
    if extra.get("prometheus_slurm_controller") == "":
        assert "SlurmctldDown" not in names and "SlurmdDown" in names
    if "prometheus_nfs_clients" in extra:
        assert r'instance=~"gpu\\.01|gpu\\-02"' in (tmp_path / RULES_FILE).read_text()


def test_exports_the_node_exporters_cannot_see_are_left_out() -> None:
    # Debian's exporter leaves /mnt, /media, /run, ... out: a share there is never reported.
    exports = [{"path": "/mnt/scratch", "mount": "/scratch"}, {"path": "/srv/home", "mount": "/media/home"}]
    rules = yaml.safe_load(render_rules(inventory_for(KERNEL_NFS), prometheus_nfs_exports=exports))
    exprs = {(rule["alert"], rule["labels"].get("seen_from")): rule["expr"] for rule in _alert_rules(rules)}
    server = exprs[("SharedStorageNearlyFull", "nfs_server")]
    assert '"/srv/home"' in server and "/mnt" not in server
    assert '"/scratch"' in exprs[("NfsMountMissing", None)] and "/media" not in exprs[("NfsMountMissing", None)]
    assert '"/scratch"' in exprs[("SharedStorageNearlyFull", "nfs_client")]


# ---------------------------------------------------------------- prometheus.yml


def _prometheus_yml(inventory: dict[str, Any]) -> dict[str, Any]:
    text = render("prometheus", "etc/prometheus/prometheus.yml.j2", inventory, inventory["gpuclus_monitoring_server"])
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def _jobs(config: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    return {
        job["job_name"]: {static["labels"]["instance"]: static["targets"] for static in job["static_configs"]}
        for job in config["scrape_configs"]
    }


def _expected_targets(inventory: dict[str, Any]) -> list[str]:
    variables = role_variables("prometheus", inventory, inventory["gpuclus_monitoring_server"], {})
    templar = Templar(loader=DataLoader(), variables=variables)
    return list(templar.template(trust_as_template("{{ __prometheus_expected_targets }}")))


def test_prometheus_loads_the_rules_scrapes_dcgm_and_sends_to_alertmanager() -> None:
    inventory = inventory_for(KERNEL_NFS)
    config = _prometheus_yml(inventory)
    assert config["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    assert config["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["10.0.0.10:9093"]}]}]}
    jobs = _jobs(config)
    assert jobs["dcgm"] == {"gpu01": ["10.0.0.11:9400"], "gpu02": ["10.0.0.12:9400"]}
    assert jobs["alertmanager"] == {"head": ["10.0.0.10:9093"]}
    assert _expected_targets(inventory) == [
        "alertmanager/head",
        "dcgm/gpu01",
        "dcgm/gpu02",
        "node/gpu01",
        "node/gpu02",
        "node/head",
        "prometheus/head",
    ]


def test_fake_gpus_get_no_dcgm_job_and_no_alertmanager_without_it() -> None:
    inventory = inventory_for(GANESHA_NFS)
    config = _prometheus_yml(inventory)
    assert "alerting" not in config
    assert sorted(_jobs(config)) == ["node", "prometheus"]
    assert _expected_targets(inventory) == ["node/gpu01", "node/gpu02", "node/head", "prometheus/head"]


def test_promtool_accepts_the_configuration(tmp_path: Path) -> None:
    text = render("prometheus", "etc/prometheus/prometheus.yml.j2", inventory_for(KERNEL_NFS), "head")
    (tmp_path / "prometheus.yml").write_text(text)
    result = promtool("check", "config", "--syntax-only", "prometheus.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------- preflight


def _refused(inventory: dict[str, Any], **extra: Any) -> list[str]:
    """The first failing condition of each of the prometheus role's preflight asserts, for these inputs
    (Ansible stops an assert at its first false condition, so later ones may assume earlier ones)."""
    tasks = yaml.safe_load((ROLES / "prometheus" / "tasks" / "preflight.yml").read_text())
    templar = Templar(loader=DataLoader(), variables=role_variables("prometheus", inventory, "head", extra))
    refused = []
    for task in tasks:
        for condition in task.get("ansible.builtin.assert", {}).get("that", []):
            if not templar.evaluate_conditional(trust_as_template(str(condition))):
                refused.append(str(condition))
                break
    return refused


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_preflight_accepts_what_gpuclus_renders(name: str) -> None:
    assert _refused(inventory_for(CLUSTERS[name][0])) == []


@pytest.mark.parametrize(
    "extra",
    [
        {"prometheus_alert_gpu_temperature_celsius": "hot"},
        {"prometheus_alert_disk_free_percent": 100},
        {"prometheus_alert_slurm_collector_max_age": 10},
        {"prometheus_alert_disk_excluded_fstypes": ['tmpfs"}']},
        {"prometheus_nfs_clients": ['gpu01"} or vector(1) #']},
        {"prometheus_nfs_exports": [{"path": "/srv/x\nfoo"}]},
        {"prometheus_nfs_exports": [{"path": "/srv", "mount": 'relative"'}]},
        {"prometheus_slurm_controller": 'head", job=~".*'},
        {"prometheus_dcgm_exporter_port": 70000},
    ],
    ids=lambda extra: next(iter(extra)),
)
def test_preflight_refuses_what_would_break_the_rules(extra: dict[str, Any]) -> None:
    assert _refused(inventory_for(KERNEL_NFS), **extra)
