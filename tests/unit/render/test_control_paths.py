"""Control-machine paths: render writes them relative to the rendered directory, one filter makes them absolute.

playbooks/filter_plugins/gpuclus_paths.py (gpuclus_control_path) is the one
place that knows the rendered layout (the rendered directory holds
inventory/); the enroot, pyxis, sssd, pytorch_env, grafana, gpu_metrics and alertmanager
defaults call it, and nothing else in playbooks/ or roles/ resolves such a
path.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from role_templates import PLAYBOOKS, ROLES, group_vars

from gpuclus.render import render_files
from gpuclus.spec.load import load_spec_text

FILTER_FILE = PLAYBOOKS / "filter_plugins" / "gpuclus_paths.py"


def filter_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuclus_paths", FILTER_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


control_path = filter_module().control_path


def test_nothing_asked_for_stays_nothing() -> None:
    assert control_path(None, "/r/inventory") is None
    assert control_path("", "/r/inventory") == ""
    assert control_path(None) is None  # a role's default without an inventory: fine while unset


def test_an_absolute_path_is_kept_as_written(tmp_path: Path) -> None:
    assert control_path("/srv/pkgs/../grafana.deb", str(tmp_path)) == "/srv/pkgs/../grafana.deb"


def test_a_relative_path_is_read_from_the_directory_holding_inventory(tmp_path: Path) -> None:
    rendered = tmp_path / "lab" / "rendered"
    (rendered / "inventory").mkdir(parents=True)
    assert control_path("../site/art", str(rendered / "inventory")) == str(tmp_path / "lab" / "site" / "art")
    assert control_path("wheels/./x", str(rendered / "inventory")) == str(rendered / "wheels" / "x")


def test_symlinks_are_resolved_before_going_up(tmp_path: Path) -> None:
    # As os.path.realpath (the playbooks' old realpath filter): '..' of a linked inventory is its target's parent.
    real = tmp_path / "runs" / "1"
    (real / "inventory").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "inventory").symlink_to(real / "inventory")
    assert control_path("art", str(tmp_path / "elsewhere" / "inventory")) == str(real / "art")


def test_a_relative_path_without_an_inventory_is_refused_in_one_line() -> None:
    with pytest.raises(AnsibleError, match=r"^gpuclus_control_path: 'art' is relative .*inventory_dir"):
        control_path("art", None)
    with pytest.raises(AnsibleError, match="is not a path"):
        control_path(["art"], "/r/inventory")


# --- the callers, through Ansible's own templating --------------------------------------------------


def role_defaults(role: str, *names: str) -> dict[str, Any]:
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())
    return {name: defaults[name] for name in names}


def templated(expressions: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    variables = {**inputs, **{name: trust_as_template(text) for name, text in expressions.items()}}
    templar = Templar(loader=DataLoader(), variables=variables)
    return {name: templar.template(trust_as_template("{{ " + name + " }}")) for name in expressions}


SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 1}}
containers:
  enroot: true
  pyxis: true
  artifacts_dir: site/art
  credentials_file: ngc.credentials
"""


def test_render_then_the_containers_roles_find_the_spec_files(tmp_path: Path) -> None:
    # What render writes for a spec in tmp_path, rendered into rendered/ beside it, read by the roles' defaults.
    art = tmp_path / "site" / "art"
    art.mkdir(parents=True)
    for name in ("enroot-4.1.2-src.tar.gz", "pyxis-0.24.0-src.tar.gz"):
        (art / name).write_bytes(b"")
    (tmp_path / "ngc.credentials").write_text("machine nvcr.io login $oauthtoken password k\n")
    (tmp_path / "ngc.credentials").chmod(0o600)
    loaded = load_spec_text(SPEC, str(tmp_path / "cluster.yaml"))
    assert loaded.ok and loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(
        loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="../.gpuclus", known_hosts="/k"
    )
    inventory = tmp_path / "rendered" / "inventory"
    inventory.mkdir(parents=True)
    defaults = {
        **role_defaults("enroot", "enroot_artifacts_dir", "enroot_credentials_file", "enroot_control_cache_dir"),
        **role_defaults("pyxis", "pyxis_artifacts_dir"),
    }
    values = templated(defaults, {**group_vars(files), "inventory_dir": str(inventory)})
    assert values == {
        "enroot_artifacts_dir": str(art),
        "enroot_credentials_file": str(tmp_path / "ngc.credentials"),
        "enroot_control_cache_dir": str(tmp_path / ".gpuclus" / "cache" / "enroot"),
        "pyxis_artifacts_dir": str(art),
    }
    unset = {"gpuclus_containers_artifacts_dir": None, "gpuclus_enroot_credentials_file": None}
    values = templated(defaults, {**group_vars(files), **unset, "inventory_dir": str(inventory)})
    assert values["enroot_artifacts_dir"] == values["enroot_credentials_file"] == ""
    assert values["pyxis_artifacts_dir"] is None


def test_the_pytorch_env_and_sssd_defaults(tmp_path: Path) -> None:
    inventory = str(tmp_path / "rendered" / "inventory")
    wheelhouse = role_defaults("pytorch_env", "pytorch_env_wheelhouse")
    assert templated(wheelhouse, {"gpuclus_pytorch_wheelhouse": "../wheels", "inventory_dir": inventory}) == {
        "pytorch_env_wheelhouse": str(tmp_path / "wheels")
    }
    assert templated(wheelhouse, {"gpuclus_pytorch_wheelhouse": None, "inventory_dir": inventory}) == {
        "pytorch_env_wheelhouse": ""
    }
    sssd = role_defaults("sssd", "sssd_bind_password_file", "sssd_ca_cert_file")
    directory = {"bind_password_file": "../ldap.password", "ca_cert_file": "/etc/ssl/ca.pem"}
    assert templated(sssd, {"gpuclus_users_directory": directory, "inventory_dir": inventory}) == {
        "sssd_bind_password_file": str(tmp_path / "ldap.password"),
        "sssd_ca_cert_file": "/etc/ssl/ca.pem",
    }
    empty = {"bind_password_file": "", "ca_cert_file": ""}
    assert set(templated(sssd, {"gpuclus_users_directory": empty, "inventory_dir": inventory}).values()) == {""}
    alertmanager = role_defaults("alertmanager", "alertmanager_receiver", "alertmanager_webhook_url_file")
    receiver = {"webhook_url_file": "../.gpuclus/secrets/alertmanager_webhook_url"}
    assert templated(alertmanager, {"gpuclus_alertmanager_receiver": receiver, "inventory_dir": inventory})[
        "alertmanager_webhook_url_file"
    ] == str(tmp_path / ".gpuclus" / "secrets" / "alertmanager_webhook_url")


# Anything that spells the rendered layout out by hand: inventory_dir other than as the filter's argument,
# or the realpath filter the five places used before.
BY_HAND = re.compile(r"inventory_dir(?!\s*(\|\s*default\(none\)\s*)?\))|\|\s*realpath\b")


def test_no_playbook_or_role_resolves_a_control_path_by_hand() -> None:
    files = [*PLAYBOOKS.glob("*.yml"), *(path for path in ROLES.rglob("*.yml") if "molecule" not in path.parts)]
    found = [
        f"{path.relative_to(ROLES.parent)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if not line.lstrip().startswith("#") and BY_HAND.search(line)
    ]
    assert found == []
    # ... and the filter is really called where those paths are read.
    callers = {
        path.relative_to(ROLES.parent).as_posix()
        for path in files
        if "gpuclus_control_path(inventory_dir" in path.read_text()
    }
    assert callers == {
        "roles/alertmanager/defaults/main.yml",
        "roles/sssd/defaults/main.yml",
        "roles/pytorch_env/defaults/main.yml",
        "roles/grafana/defaults/main.yml",
        "roles/gpu_metrics/defaults/main.yml",
        "roles/enroot/defaults/main.yml",
        "roles/pyxis/defaults/main.yml",
    }
