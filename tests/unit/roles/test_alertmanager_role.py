"""The alertmanager role's configuration, as the role writes it, under Alertmanager's own amtool.

alertmanager.yml is rendered the way the role renders it (tests/unit/role_templates.py:
the role's defaults and vars, Ansible's templating) from what gpuclus renders
for a spec with `monitoring.alertmanager` and each kind of `alert_receiver`;
`amtool check-config` (Debian's, tests/prometheus_tools.py) must accept every
one. The preflight asserts are evaluated the same way: they accept what
gpuclus renders and refuse what would not be valid in alertmanager.yml.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, group_vars, render, role_variables

from gpuclus.render import render_files
from gpuclus.spec.load import load_spec_text
from prometheus_tools import require

# The webhook URL is read with the `file` lookup, a plugin Ansible loads through its collection loader.
init_plugin_loader()

SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: admin}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, nfs_server, monitoring, login]}
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 2}}
monitoring:
  prometheus: true
  alertmanager: true
"""

WEBHOOK = {"webhook_url": "https://chat.example.org/hooks/T0K3N?channel=gpu#x"}
EMAIL = {"email_to": "hpc-admins@example.org", "email_from": "gpuclus@lab.example.org", "smarthost": "mail.lab:25"}

RECEIVERS = {
    "none": None,
    "webhook": WEBHOOK,
    "email": EMAIL,
    "both": {**WEBHOOK, **EMAIL},
}


@pytest.fixture(autouse=True, scope="module")
def _rendered_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Where the rendered inventory sits, with the secret deploy keeps beside it (state_dir "x")."""
    global RENDERED
    RENDERED = tmp_path_factory.mktemp("rendered")
    (RENDERED / "inventory").mkdir()
    secret = RENDERED / "x" / "secrets" / "alertmanager_webhook_url"
    secret.parent.mkdir(parents=True)
    secret.write_text(WEBHOOK["webhook_url"] + "\n")


RENDERED = Path()


def inventory_for(receiver: dict[str, str] | None) -> dict[str, Any]:
    """What render writes for the spec with this receiver, read from RENDERED; the preflight's stat of the
    webhook URL's file there as it finds it."""
    text = SPEC
    if receiver is not None:
        text += "  alert_receiver: " + yaml.safe_dump(receiver, default_flow_style=True)
    loaded = load_spec_text(text)
    assert loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    return {
        **group_vars(files),
        "inventory_dir": str(RENDERED / "inventory"),
        "__alertmanager_webhook_url_stat": {"stat": {"isreg": True}},
    }


def config(receiver: dict[str, str] | None, **extra: Any) -> str:
    return render("alertmanager", "etc/prometheus/alertmanager.yml.j2", inventory_for(receiver), "head", **extra)


def amtool_check(text: str, directory: Path) -> subprocess.CompletedProcess[str]:
    (directory / "alertmanager.yml").write_text(text)
    return subprocess.run(
        [str(require("amtool")), "check-config", "alertmanager.yml"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("kind", sorted(RECEIVERS))
def test_amtool_accepts_the_configuration(kind: str, tmp_path: Path) -> None:
    result = amtool_check(config(RECEIVERS[kind]), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


@pytest.mark.parametrize("kind", sorted(RECEIVERS))
def test_one_receiver_with_what_the_spec_asks_for(kind: str) -> None:
    loaded = yaml.safe_load(config(RECEIVERS[kind]))
    assert loaded["route"]["receiver"] == "gpuclus"
    assert loaded["route"]["group_by"] == ["alertname", "instance"]
    assert loaded["route"]["repeat_interval"] == "4h"
    [receiver] = loaded["receivers"]
    integrations = {key for key in receiver if key != "name"}
    if kind == "none":
        # No integration: alerts stay visible in Alertmanager's API and Prometheus' Alerts page.
        assert integrations == set()
        assert "global" not in loaded
    if kind in ("webhook", "both"):
        assert receiver["webhook_configs"] == [{"url": WEBHOOK["webhook_url"], "send_resolved": True}]
    if kind in ("email", "both"):
        assert receiver["email_configs"] == [{"to": EMAIL["email_to"], "send_resolved": True}]
        assert loaded["global"] == {
            "smtp_smarthost": EMAIL["smarthost"],
            "smtp_from": EMAIL["email_from"],
            "smtp_require_tls": True,
        }
    assert integrations == {"none": set(), "webhook": {"webhook_configs"}, "email": {"email_configs"}}.get(
        kind, {"webhook_configs", "email_configs"}
    )


def test_a_node_down_silences_its_other_targets() -> None:
    [rule] = yaml.safe_load(config(None))["inhibit_rules"]
    assert rule == {
        "source_matchers": ['alertname="NodeDown"'],
        "target_matchers": ['alertname="TargetDown"'],
        "equal": ["instance"],
    }


def test_one_alertmanager_without_clustering_and_links_to_itself() -> None:
    text = render("alertmanager", "etc/default/prometheus-alertmanager.j2", inventory_for(None), "head")
    [line] = [line for line in text.splitlines() if line.startswith("ARGS=")]
    assert line == (
        'ARGS="--web.listen-address=:9093 --web.external-url=http://10.0.0.10:9093/ '
        '--cluster.listen-address= --data.retention=120h"'
    )


# ---------------------------------------------------------------- preflight


def refused(inventory: dict[str, Any], **extra: Any) -> list[str]:
    """The first failing condition of each preflight assert that runs (Ansible stops an assert at its
    first false condition; a task whose `when` is false is skipped)."""
    tasks = yaml.safe_load((ROLES / "alertmanager" / "tasks" / "preflight.yml").read_text())
    templar = Templar(loader=DataLoader(), variables=role_variables("alertmanager", inventory, "head", extra))
    found = []
    for task in tasks:
        check = task.get("ansible.builtin.assert")
        if check is None:
            continue
        if "when" in task and not templar.evaluate_conditional(trust_as_template(str(task["when"]))):
            continue
        for condition in check["that"]:
            if not templar.evaluate_conditional(trust_as_template(str(condition))):
                found.append(str(condition))
                break
    return found


@pytest.mark.parametrize("kind", sorted(RECEIVERS))
def test_preflight_accepts_what_gpuclus_renders(kind: str) -> None:
    assert refused(inventory_for(RECEIVERS[kind])) == []


@pytest.mark.parametrize(
    "receiver",
    [
        {"webhook_url": "ftp://chat.example.org/x"},
        {"webhook_url": 'https://chat.example.org/x"\n  evil: 1'},
        {"webhook_url": "https://chat example.org/"},
        {"email_to": "admins@example.org"},
        {**EMAIL, "email_to": "admins@example.org\nbcc: x@y.org"},
        {**EMAIL, "email_from": "gpuclus"},
        {**EMAIL, "smarthost": "mail.lab"},
        {**EMAIL, "smarthost": "mail.lab:99999"},
        {"webhook_url": None, "password": "secret"},
        {"webhook_url": 42},
        {"webhook_url": "https://chat.example.org/x", "webhook_url_file": "/dev/null"},
    ],
    ids=lambda receiver: repr(receiver)[:40],
)
def test_preflight_refuses_what_alertmanager_yml_cannot_hold(receiver: dict[str, Any]) -> None:
    assert refused(inventory_for(None), alertmanager_receiver=receiver)


@pytest.mark.parametrize(
    "extra",
    [
        {"alertmanager_group_by": ["alertname", "in stance"]},
        {"alertmanager_repeat_interval": "4 hours"},
        {"alertmanager_port": 0},
        {"alertmanager_external_url": "http://10.0.0.10:9093/ --evil"},
    ],
    ids=lambda extra: next(iter(extra)),
)
def test_preflight_refuses_bad_routing_and_listener_settings(extra: dict[str, Any]) -> None:
    assert refused(inventory_for(None), **extra)


def test_the_webhook_url_is_never_shown() -> None:
    tasks = yaml.safe_load((ROLES / "alertmanager" / "tasks" / "preflight.yml").read_text())
    [check] = [task for task in tasks if task["name"] == "Check the webhook URL"]
    assert "webhook_url }}" not in check["ansible.builtin.assert"]["fail_msg"]
    assert check["no_log"] is True  # its conditions hold the URL, which -v would print
    configure = yaml.safe_load((ROLES / "alertmanager" / "tasks" / "configure.yml").read_text())
    [write] = [task for task in configure if "alertmanager.yml" in task["ansible.builtin.template"]["src"]]
    assert write["no_log"] == "{{ __alertmanager_webhook | bool }}"


def test_gpuclus_renders_the_webhook_urls_file_never_the_url() -> None:
    receiver = inventory_for(WEBHOOK)["gpuclus_alertmanager_receiver"]
    assert receiver["webhook_url_file"] == "x/secrets/alertmanager_webhook_url"
    assert "T0K3N" not in str(receiver)


def test_a_webhook_url_from_a_file_the_role_is_given(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.write_text("https://chat.example.org/hooks/0THER\n")
    text = config(None, alertmanager_receiver={"webhook_url_file": str(hook)})
    [receiver] = yaml.safe_load(text)["receivers"]
    assert receiver["webhook_configs"] == [{"url": "https://chat.example.org/hooks/0THER", "send_resolved": True}]


def test_preflight_refuses_a_webhook_url_file_that_is_not_there() -> None:
    inventory = {**inventory_for(WEBHOOK), "__alertmanager_webhook_url_stat": {"stat": {"exists": False}}}
    assert refused(inventory) == ["__alertmanager_webhook_url_stat.stat.isreg | default(false)"]
