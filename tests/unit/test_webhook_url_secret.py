"""The Alertmanager webhook URL is a secret (issue 40, class 10), like the munge key and the bind password.

Chat services put a token in the URL's path. gpuclus keeps the spec's webhook_url in .gpuclus/secrets/ (0600),
renders only that file's path (group_vars are 0644, and plan prints their diff), reads the URL in no_log tasks,
and shows it only masked: scheme://host/… ***. webhook_url_file names a 0600 file of the admin's own instead,
checked like users.directory.bind_password_file.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from deploy_specs import THREE_NODE_SPEC
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.deploy import in_sync, pipeline
from gpuclus.deploy.last_applied import save_last_applied
from gpuclus.errors import UsageError
from gpuclus.render import render_files
from gpuclus.secret_files import WEBHOOK_URL, keep_webhook_url, secrets_directory
from gpuclus.spec.load import load_spec, load_spec_text
from gpuclus.spec.models import masked_url
from gpuclus.state import StateDir

TOKEN = "T0K3Nxoxb9f8e7d6c5"
URL = f"https://hooks.chat.example.org/services/{TOKEN}?channel=gpu"
OTHER_URL = f"https://hooks.chat.example.org/services/{TOKEN}-2"
RECEIVER = f"monitoring:\n  alertmanager: true\n  alert_receiver:\n    webhook_url: {URL}\n"

runner = CliRunner()


@pytest.fixture(autouse=True)
def real_playbooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCLUS_PLAYBOOKS_DIR", raising=False)


def spec_with(directory: Path, monitoring: str = RECEIVER) -> Path:
    spec = directory / "cluster.yaml"
    spec.write_text(THREE_NODE_SPEC + monitoring)
    return spec


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- render: the path, never the URL -------------------------------------------------------------------------------


def test_no_rendered_file_holds_the_token() -> None:
    loaded = load_spec_text(THREE_NODE_SPEC + RECEIVER)
    assert loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(
        loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="../.gpuclus", known_hosts="/k"
    )
    assert [name for name, text in files.items() if TOKEN in text] == []
    assert (
        "webhook_url_file: ../.gpuclus/secrets/alertmanager_webhook_url"
        in files["inventory/group_vars/all/monitoring.yml"]
    )


def test_render_writes_no_token_and_says_none(tmp_path: Path) -> None:
    spec = spec_with(tmp_path)
    result = runner.invoke(app, ["render", str(spec), "--json"])
    assert result.exit_code == 0, result.output
    assert TOKEN not in result.output
    written = [path for path in (tmp_path / "rendered").rglob("*") if path.is_file() and TOKEN in path.read_text()]
    assert written == []


# --- plan: its diff and its JSON -------------------------------------------------------------------------------


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_plan_shows_no_token_when_the_receiver_changes(tmp_path: Path, as_json: bool) -> None:
    # Last deployed without a receiver: the plan's diff of monitoring.yml is what once held the URL.
    before = spec_with(tmp_path, "")
    save_last_applied(StateDir.beside(before), pipeline.render_for_run(before, load_spec(before)))
    spec = spec_with(tmp_path)
    result = runner.invoke(app, ["plan", str(spec), "--local", *(["--json"] if as_json else [])])
    assert result.exit_code in (0, 1), result.output
    assert "monitoring.yml" in result.output
    assert TOKEN not in result.output
    if as_json:
        assert TOKEN not in json.dumps(json.loads(result.stdout))


def test_plan_shows_no_token_when_only_the_url_changes(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, RECEIVER.replace(URL, OTHER_URL))
    save_last_applied(StateDir.beside(spec), pipeline.render_for_run(spec, load_spec(spec)))
    spec_with(tmp_path)
    result = runner.invoke(app, ["plan", str(spec), "--local", "--json"])
    assert TOKEN not in result.output


# --- the secret file deploy keeps ---------------------------------------------------------------------------------


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir.beside(tmp_path / "cluster.yaml")


def test_deploy_keeps_the_url_in_a_0600_secret(state: StateDir) -> None:
    keep_webhook_url(state, URL)
    secret = secrets_directory(state) / WEBHOOK_URL
    assert secret.read_text() == URL + "\n"
    assert mode(secret) == 0o600
    assert mode(secrets_directory(state)) == 0o700


def test_the_secret_follows_the_spec(state: StateDir) -> None:
    secret = secrets_directory(state) / WEBHOOK_URL
    keep_webhook_url(state, URL)
    secret.chmod(0o644)
    keep_webhook_url(state, OTHER_URL)
    assert secret.read_text() == OTHER_URL + "\n" and mode(secret) == 0o600
    keep_webhook_url(state, None)  # taken out of the spec: its token does not stay behind
    assert not secret.exists()


def test_the_secret_is_not_written_through_a_link(state: StateDir, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("theirs\n")
    victim.chmod(0o644)
    secrets_directory(state).mkdir(parents=True)
    (secrets_directory(state) / WEBHOOK_URL).symlink_to(victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        keep_webhook_url(state, URL)
    assert victim.read_text() == "theirs\n" and mode(victim) == 0o644


def test_a_new_url_is_a_new_run_key(tmp_path: Path) -> None:
    # The rendered files are the same for every URL: the secret's content is what tells the runs apart.
    spec = spec_with(tmp_path)
    state = StateDir.beside(spec)
    rendered = pipeline.render_for_run(spec, load_spec(spec))
    keys = []
    for url in (URL, OTHER_URL):
        keep_webhook_url(state, url)
        keys.append(in_sync.run_key(rendered, ["monitoring"], secrets_directory(state), state.public_key))
    assert keys[0] != keys[1]


# --- spec check: masked, and webhook_url_file checked like bind_password_file --------------------------------------


def test_masked_url_keeps_scheme_and_host_only() -> None:
    assert masked_url(URL) == "https://hooks.chat.example.org/… ***"
    assert masked_url(f"https://bot:{TOKEN}@chat.example.org:8443/x") == "https://chat.example.org/… ***"
    assert masked_url(f"{TOKEN} not a url") == "***"


@pytest.mark.parametrize(
    "bad",
    [
        f"https://hooks.chat.example.org/{TOKEN} x",
        f"https://hooks_x.example.org/{TOKEN}",
        f"https://0x7f000001/{TOKEN}",
    ],
    ids=["space", "underscore-host", "numeric-host"],
)
def test_spec_check_names_a_bad_url_masked(tmp_path: Path, bad: str) -> None:
    spec = spec_with(tmp_path, RECEIVER.replace(URL, f'"{bad}"'))
    result = runner.invoke(app, ["spec", "check", str(spec), "--json"])
    assert result.exit_code == 3, result.output
    findings = json.loads(result.stdout)["findings"]
    [finding] = [finding for finding in findings if finding["path"].endswith("webhook_url")]
    assert TOKEN not in json.dumps(finding)
    assert "***" in finding["message"]


def file_receiver(tmp_path: Path, content: str, file_mode: int = 0o600) -> Path:
    hook = tmp_path / "hook.url"
    hook.write_text(content)
    hook.chmod(file_mode)
    return spec_with(tmp_path, "monitoring:\n  alertmanager: true\n  alert_receiver:\n    webhook_url_file: hook.url\n")


def codes(spec: Path) -> list[str]:
    result = runner.invoke(app, ["spec", "check", str(spec), "--json"])
    assert TOKEN not in result.output
    return [finding["code"] for finding in json.loads(result.stdout)["findings"] if "webhook" in finding["path"]]


def test_a_webhook_url_file_is_rendered_as_its_path(tmp_path: Path) -> None:
    spec = file_receiver(tmp_path, URL + "\n")
    assert codes(spec) == []
    loaded = load_spec(spec)
    assert loaded.spec is not None and loaded.topology is not None
    files = render_files(
        loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="../.gpuclus", known_hosts="/k"
    )
    assert "webhook_url_file: ../hook.url" in files["inventory/group_vars/all/monitoring.yml"]
    assert [name for name, text in files.items() if TOKEN in text] == []


def test_a_webhook_url_file_others_can_read_is_refused(tmp_path: Path) -> None:
    assert codes(file_receiver(tmp_path, URL + "\n", 0o644)) == ["webhook-url-file-open"]


@pytest.mark.parametrize("content", [f"{URL}\n{URL}\n", f"ftp://x.example.org/{TOKEN}\n", ""], ids=repr)
def test_a_webhook_url_file_without_one_url_is_refused_unshown(tmp_path: Path, content: str) -> None:
    assert codes(file_receiver(tmp_path, content)) == ["webhook-url-file-grammar"]


def test_a_missing_webhook_url_file_is_refused(tmp_path: Path) -> None:
    spec = file_receiver(tmp_path, URL)
    (tmp_path / "hook.url").unlink()
    assert codes(spec) == ["webhook-url-file-missing"]


def test_webhook_url_and_webhook_url_file_together_are_refused(tmp_path: Path) -> None:
    spec = file_receiver(tmp_path, URL + "\n")
    spec.write_text(spec.read_text() + f"    webhook_url: {URL}\n")
    result = runner.invoke(app, ["spec", "check", str(spec), "--json"])
    assert result.exit_code == 3
    assert "not both" in result.stdout and TOKEN not in result.stdout
