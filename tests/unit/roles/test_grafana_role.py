"""The grafana role without a node: its files, its inputs, and the skip path, as Ansible renders them.

Grafana has no package on any registry the CI host reaches, so the role never
installs it here (the sandbox deploys it with `grafana_unavailable: skip`, see
tests/integration/test_cluster_monitoring.py). What can be checked without
it is checked here with Ansible's own Templar over the role's defaults and
vars (tests/unit/role_templates.py): grafana.ini read as Grafana's INI, the
provisioning files as YAML, the repository files, the package file's path,
the decisions of preflight (install, fail or skip) from stand-in probe
results, the skip record, and that the admin password only ever travels in
no_log tasks and never on a command line.
"""

from __future__ import annotations

import configparser
import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, default_group_vars, first_found_vars_file, role_templar
from test_nvidia_driver_choices import OSES

ROLE = "grafana"
TASKS = ROLES / ROLE / "tasks"
DEBIAN = "debian12"

# The probe's checksums come from lookups (file, template), which need Ansible's plugin loader.
init_plugin_loader()


@pytest.fixture
def secrets(tmp_path: Path) -> Path:
    directory = tmp_path / "secrets"
    directory.mkdir()
    (directory / "grafana_admin_password").write_text("s3cretPassw0rdFromGpuclus\n")
    return directory


def probe(*, installed: bool = True, stale_files: list[str] | None = None, active: bool = True) -> dict[str, Any]:
    return {
        "stale": {
            "files": stale_files or [],
            "packages": [] if installed else ["grafana"],
            "units": [] if active else ["grafana-server"],
        },
        "found": {"units": {"grafana-server": "loaded" if installed else "not-found"}},
    }


def templar(secrets: Path, os_name: str = DEBIAN, **inputs: Any) -> Templar:
    facts = OSES[os_name]
    vars_file = {"Debian": "Debian.yml", "RedHat": "RedHat.yml"}[facts["os_family"]]
    # What render writes for a spec at its defaults, then this test's cluster.
    variables: dict[str, Any] = {
        **default_group_vars(),
        "gpuclus_secrets_dir": str(secrets),
        "gpuclus_apt_cache_valid_time": 3600,
        "gpuclus_package_lock_timeout": 300,
        "gpuclus_cluster_name": "lab",
        "gpuclus_monitoring_server": "gpu01",
        "__grafana_probe": probe(),
        # Where the lookups find the role's templates and files, as in a play.
        "ansible_search_path": [str(ROLES / ROLE)],
    }
    variables.update(inputs)
    t = role_templar(ROLE, vars_file, facts, **variables)
    assert first_found_vars_file(ROLE, t) == vars_file
    return t


def value(t: Templar, expression: str) -> Any:
    return t.template(trust_as_template("{{ " + expression + " }}"))


def text_of(t: Templar, template: str) -> str:
    return str(t.template(trust_as_template(template)))


def condition(t: Templar, text: str) -> bool:
    return bool(t.evaluate_conditional(trust_as_template(text)))


def render(t: Templar, template: str) -> str:
    source = (ROLES / ROLE / "templates" / template).read_text()
    return str(t.template(trust_as_template(source)))


def tasks(name: str) -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load((TASKS / name).read_text())
    return loaded


def flat(task_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tasks with blocks' and rescues' tasks in line."""
    found = []
    for task in task_list:
        found.append(task)
        for key in ("block", "rescue", "always"):
            found.extend(flat(task.get(key, [])))
    return found


def task(name: str, title: str) -> dict[str, Any]:
    return next(item for item in flat(tasks(name)) if item.get("name") == title)


def whens(item: dict[str, Any]) -> list[str]:
    when = item.get("when", [])
    return [when] if isinstance(when, str) else list(when)


# ---------------------------------------------------------------- files


def test_grafana_ini_keeps_grafana_closed(secrets: Path) -> None:
    text = render(templar(secrets), "etc/grafana/grafana.ini.j2")
    ini = configparser.ConfigParser(interpolation=None)
    ini.read_string(text)
    assert ini["server"]["http_port"] == "3000"
    assert ini["security"]["admin_user"] == "admin"
    assert ini["security"]["admin_password"] == "$__file{/etc/grafana/gpuclus-admin-password}"
    assert ini["users"]["allow_sign_up"] == "false"
    assert ini["auth.anonymous"]["enabled"] == "false"
    assert ini["analytics"]["reporting_enabled"] == "false"
    assert ini["analytics"]["check_for_updates"] == "false"
    assert ini["paths"]["data"] == "/var/lib/grafana"
    assert (
        ini["dashboards"]["default_home_dashboard_path"] == "/var/lib/grafana/dashboards/gpuclus/gpuclus-cluster.json"
    )
    assert "s3cret" not in text, "the password stays out of grafana.ini"
    assert text.startswith("# managed by gpuclus")


def test_grafana_ini_takes_the_port(secrets: Path) -> None:
    text = render(templar(secrets, grafana_port=3300), "etc/grafana/grafana.ini.j2")
    ini = configparser.ConfigParser(interpolation=None)
    ini.read_string(text)
    assert ini["server"]["http_port"] == "3300"


def test_the_datasource_is_the_clusters_prometheus_by_uid(secrets: Path) -> None:
    document = yaml.safe_load(render(templar(secrets), "etc/grafana/provisioning/datasources/gpuclus.yaml.j2"))
    assert document["apiVersion"] == 1
    [source] = document["datasources"]
    assert source["uid"] == "gpuclus-prometheus"
    assert source["type"] == "prometheus" and source["access"] == "proxy"
    assert source["url"] == "http://localhost:9090"
    assert source["isDefault"] is True and source["editable"] is False
    assert source["jsonData"]["timeInterval"] == "15s"
    other = templar(secrets, grafana_prometheus_url="http://10.0.0.10:9090/prom")
    document = yaml.safe_load(render(other, "etc/grafana/provisioning/datasources/gpuclus.yaml.j2"))
    assert document["datasources"][0]["url"] == "http://10.0.0.10:9090/prom"


def test_the_dashboards_are_provisioned_read_only_into_their_folder(secrets: Path) -> None:
    document = yaml.safe_load(render(templar(secrets), "etc/grafana/provisioning/dashboards/gpuclus.yaml.j2"))
    [provider] = document["providers"]
    assert provider["type"] == "file"
    assert provider["folder"] == "gpuclus"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards/gpuclus"
    assert provider["allowUiUpdates"] is False and provider["disableDeletion"] is True


def test_the_apt_source_is_grafanas_repository_with_its_key(secrets: Path) -> None:
    text = render(templar(secrets), "etc/apt/sources.list.d/grafana.sources.j2")
    fields = dict(line.split(": ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert fields == {
        "Types": "deb",
        "URIs": "https://apt.grafana.com",
        "Suites": "stable",
        "Components": "main",
        "Signed-By": "/etc/apt/keyrings/grafana.asc",
    }


def test_the_rpm_repository_checks_signatures(secrets: Path) -> None:
    t = templar(secrets, "rocky9")
    assert value(t, "__grafana_repo_file") == "/etc/yum.repos.d/grafana.repo"
    repo = configparser.ConfigParser(interpolation=None)
    repo.read_string(render(t, "etc/yum.repos.d/grafana.repo.j2"))
    assert repo["grafana"]["baseurl"] == "https://rpm.grafana.com"
    assert repo["grafana"]["gpgcheck"] == "1" and repo["grafana"]["repo_gpgcheck"] == "1"
    assert repo["grafana"]["gpgkey"] == "https://rpm.grafana.com/gpg.key"


def test_the_probe_compares_every_file_the_role_writes(secrets: Path) -> None:
    t = templar(secrets)
    wanted = {item["path"]: item for item in value(t, "__grafana_probe_files")}
    dashboards = ROLES / ROLE / "files" / "dashboards"
    for path in sorted(dashboards.glob("*.json")):
        item = wanted[f"/var/lib/grafana/dashboards/gpuclus/{path.name}"]
        assert item["checksum"] == hashlib.sha1(path.read_bytes()).hexdigest()
    password = wanted["/etc/grafana/gpuclus-admin-password"]
    assert password["checksum"] == hashlib.sha1(b"s3cretPassw0rdFromGpuclus").hexdigest()
    assert password["mode"] == "0640" and password["group"] == "grafana"
    ini = wanted["/etc/grafana/grafana.ini"]
    assert ini["checksum"] == hashlib.sha1(render(t, "etc/grafana/grafana.ini.j2").encode()).hexdigest()
    assert wanted["/var/lib/gpuclus/grafana.skipped"]["state"] == "absent"
    assert wanted["/etc/apt/keyrings/grafana.asc"] == {"path": "/etc/apt/keyrings/grafana.asc", "state": "file"}
    assert "/etc/apt/sources.list.d/grafana.sources" in wanted
    # From a package file, no repository is added.
    package = secrets / "grafana_11.1.0_amd64.deb"
    package.write_bytes(b"!<arch>\n")
    from_file = {
        item["path"] for item in value(templar(secrets, grafana_package_file=str(package)), "__grafana_probe_files")
    }
    assert not from_file & {"/etc/apt/keyrings/grafana.asc", "/etc/apt/sources.list.d/grafana.sources"}


def test_configure_writes_what_the_probe_compares(secrets: Path) -> None:
    t = templar(secrets)
    probed = set(value(t, "__grafana_config_paths"))
    for item in flat(tasks("configure.yml")):
        for when in whens(item):
            if "__grafana_probe.stale.files" in when and "item" not in when:
                path = when.split(" in ")[0].strip()
                assert value(t, path) in probed, when


# ---------------------------------------------------------------- the package source


def test_a_relative_package_file_is_read_next_to_the_inventory(secrets: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "inventory").mkdir(parents=True)
    t = templar(
        secrets, gpuclus_grafana_package="../pkgs/grafana_11.1.0_amd64.deb", inventory_dir=str(out / "inventory")
    )
    assert value(t, "grafana_package_file") == str(tmp_path / "pkgs" / "grafana_11.1.0_amd64.deb")
    assert value(t, "grafana_package_name") == "grafana"
    assert value(t, "__grafana_package_copy") == "/var/cache/gpuclus/grafana_11.1.0_amd64.deb"
    absolute = templar(secrets, gpuclus_grafana_package="/srv/grafana-enterprise_11.1.0_amd64.deb")
    assert value(absolute, "grafana_package_file") == "/srv/grafana-enterprise_11.1.0_amd64.deb"
    assert value(absolute, "grafana_package_name") == "grafana-enterprise"
    none = templar(secrets, gpuclus_grafana_package=None)
    assert value(none, "grafana_package_file") is None
    assert value(none, "__grafana_from_file") is False


def preflight_assert(title: str) -> list[str]:
    that: list[str] = task("preflight.yml", title)["ansible.builtin.assert"]["that"]
    return that


def refused(t: Templar, title: str) -> list[str]:
    return [text for text in preflight_assert(title) if not condition(t, text)]


def test_the_inputs_of_a_gpuclus_inventory_pass(secrets: Path) -> None:
    t = templar(secrets, gpuclus_grafana_unavailable="skip")
    assert refused(t, "Check the Grafana inputs") == []
    assert refused(t, "Check that this host is the monitoring node") == []


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("grafana_unavailable", "ignore"),
        ("grafana_port", 70000),
        ("grafana_admin_user", "admin\n[security]"),
        ("grafana_admin_password_file", "relative/password"),
        ("grafana_dashboards_dir", "/var/lib/grafana/dash boards"),
        ("grafana_prometheus_url", 'http://x:9090/"\n  evil: 1'),
    ],
)
def test_hostile_inputs_are_refused(secrets: Path, name: str, bad: Any) -> None:
    assert refused(templar(secrets, **{name: bad}), "Check the Grafana inputs")


def test_a_missing_password_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    assert "grafana_admin_password_file is file" in refused(templar(empty), "Check the Grafana inputs")


def test_a_package_file_must_exist_and_fit_the_os(secrets: Path) -> None:
    deb = secrets / "grafana_11.1.0_amd64.deb"
    deb.write_bytes(b"!<arch>\n")
    assert refused(templar(secrets, grafana_package_file=str(deb)), "Check the Grafana package file") == []
    assert refused(templar(secrets, "rocky9", grafana_package_file=str(deb)), "Check the Grafana package file")
    missing = str(secrets / "grafana_12.0.0_amd64.deb")
    assert refused(templar(secrets, grafana_package_file=missing), "Check the Grafana package file")


# ---------------------------------------------------------------- install, fail or skip

UNREACHABLE = {"status": -1, "msg": "Status code was -1 and not [200]: Request failed: <urlopen error timed out>"}


def main_step(title: str) -> dict[str, Any]:
    return next(item for item in tasks("main.yml") if item["name"] == title)


def included(t: Templar, title: str) -> bool:
    return all(condition(t, text) for text in whens(main_step(title)))


STEPS = [
    "Skip Grafana, saying why",
    "Install Grafana",
    "Configure Grafana",
    "Start Grafana",
    "Check the admin password and the dashboards",
]
ALL_STALE = [
    "/etc/apt/keyrings/grafana.asc",
    "/etc/apt/sources.list.d/grafana.sources",
    "/etc/grafana/grafana.ini",
    "/var/lib/grafana/dashboards/gpuclus/gpuclus-gpus.json",
]


def fresh(secrets: Path, answer: dict[str, Any] | None, **inputs: Any) -> Templar:
    """A node without Grafana whose repository probe gave `answer` (None: not asked)."""
    extra: dict[str, Any] = {"__grafana_probe": probe(installed=False, stale_files=ALL_STALE, active=False)}
    if answer is not None:
        extra["__grafana_repository_answer"] = answer
    return templar(secrets, **{**extra, **inputs})


def test_unreachable_with_skip_installs_nothing_and_records_why(secrets: Path) -> None:
    t = fresh(secrets, UNREACHABLE, gpuclus_grafana_unavailable="skip")
    assert value(t, "__grafana_reachable") is False
    assert value(t, "__grafana_skipped") is True
    assert [step for step in STEPS if included(t, step)] == ["Skip Grafana, saying why"]
    fail = task("preflight.yml", "Stop where Grafana cannot be installed")
    assert not all(condition(t, text) for text in whens(fail))
    record = value(t, "__grafana_skip_text")
    assert "Grafana is not installed on gpu01" in record
    assert "https://apt.grafana.com" in record and "monitoring.grafana_package" in record
    assert "timed out" not in record, "no error text: the record is the same on every run"
    message = text_of(t, task("skip.yml", "Say that Grafana is skipped")["ansible.builtin.set_fact"]["grafana_notice"])
    assert message.startswith("Grafana SKIPPED: ") and "timed out" in message
    assert "\n" not in message


def test_the_skip_path_writes_the_same_record_every_time(secrets: Path) -> None:
    first = value(fresh(secrets, UNREACHABLE, gpuclus_grafana_unavailable="skip"), "__grafana_skip_text")
    other = {"status": -1, "msg": "Request failed: <urlopen error [Errno -3] Temporary failure in name resolution>"}
    again = value(fresh(secrets, other, gpuclus_grafana_unavailable="skip"), "__grafana_skip_text")
    assert first == again
    record = task("skip.yml", "Record that Grafana is skipped, and why")["ansible.builtin.copy"]
    assert record["content"] == "{{ __grafana_skip_text }}"
    assert record["dest"] == "{{ grafana_skip_record }}"


def test_unreachable_with_fail_stops_with_what_to_do(secrets: Path) -> None:
    t = fresh(secrets, UNREACHABLE)  # grafana_unavailable defaults to fail
    assert value(t, "grafana_unavailable") == "fail"
    fail = task("preflight.yml", "Stop where Grafana cannot be installed")
    assert all(condition(t, text) for text in whens(fail))
    message = " ".join(text_of(t, fail["ansible.builtin.fail"]["msg"]).split())
    assert "https://apt.grafana.com is not reachable from gpu01" in message
    assert "set monitoring.grafana_package to its path" in message
    assert "monitoring.grafana_unavailable to skip" in message


def test_a_reachable_repository_installs_configures_and_checks(secrets: Path) -> None:
    t = fresh(secrets, {"status": 200, "msg": "OK (1694 bytes)"}, gpuclus_grafana_unavailable="skip")
    assert value(t, "__grafana_skipped") is False
    assert [step for step in STEPS if included(t, step)] == STEPS[1:]


def test_a_package_file_needs_no_repository(secrets: Path) -> None:
    package = secrets / "grafana_11.1.0_amd64.deb"
    package.write_bytes(b"!<arch>\n")
    t = fresh(secrets, None, grafana_package_file=str(package), gpuclus_grafana_unavailable="skip")
    probe_task = task("preflight.yml", "Ask whether the node reaches Grafana's repository")
    assert not all(condition(t, text) for text in whens(probe_task)), "no repository probe with a package file"
    assert value(t, "__grafana_reachable") is True and value(t, "__grafana_skipped") is False
    assert included(t, "Install Grafana")


def test_an_installed_grafana_is_not_probed_again(secrets: Path) -> None:
    t = templar(secrets, gpuclus_grafana_unavailable="fail")  # installed, every file as wanted
    probe_task = task("preflight.yml", "Ask whether the node reaches Grafana's repository")
    assert not all(condition(t, text) for text in whens(probe_task))
    assert value(t, "__grafana_skipped") is False
    steps = [step for step in STEPS if included(t, step)]
    assert steps == ["Check the admin password and the dashboards"], "a no-change run only checks"


def test_check_mode_on_a_fresh_node_leaves_configuration_to_the_real_run(secrets: Path) -> None:
    t = fresh(secrets, {"status": 200}, ansible_check_mode=True)
    assert value(t, "__grafana_check_mode_uninstalled") is True
    assert [step for step in STEPS if included(t, step)] == ["Install Grafana"]


# ---------------------------------------------------------------- the admin password


def test_the_password_travels_only_in_no_log_tasks_and_never_on_a_command_line() -> None:
    readers = []
    for name in sorted(path.name for path in TASKS.glob("*.yml")):
        for item in flat(tasks(name)):
            text = yaml.safe_dump({key: value for key, value in item.items() if key not in ("block", "rescue")})
            if "grafana_admin_password_file)" in text or "__grafana_probe_files" in text:
                readers.append(item["name"])
                assert item.get("no_log") is True, f"{name}: {item['name']} must run with no_log"
    assert len(readers) >= 4
    reset = task("verify.yml", "Set the admin password")
    command = reset["ansible.builtin.command"]
    assert "--password-from-stdin" in command["argv"]
    assert "password" not in " ".join(command["argv"]).replace("--password-from-stdin", "").replace(
        "reset-admin-password", ""
    )
    assert "grafana_admin_password_file" in command["stdin"]
    assert reset["become_user"] == "{{ __grafana_user }}"
    assert reset["when"] == "__grafana_login.status | default(200) == 401", "reset only when Grafana refuses it"


def test_the_verify_step_looks_for_every_dashboard_uid(secrets: Path) -> None:
    t = templar(secrets)
    uids = value(t, "__grafana_dashboards")
    assert sorted(uids) == sorted(path.stem for path in (ROLES / ROLE / "files" / "dashboards").glob("*.json"))
    search = task("verify.yml", "Wait until Grafana has loaded every gpuclus dashboard")
    assert "is superset(__grafana_dashboards)" in search["until"]


# ---------------------------------------------------------------- argument specs


def test_every_default_is_described_in_the_argument_specs() -> None:
    defaults = yaml.safe_load((ROLES / ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLES / ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(options) == set(defaults)
    assert options["grafana_unavailable"]["choices"] == ["fail", "skip"]
    for name, option in options.items():
        assert option.get("description"), name
        literal = defaults[name]
        if "default" in option and not (isinstance(literal, str) and "{{" in literal):
            assert option["default"] == literal, name
