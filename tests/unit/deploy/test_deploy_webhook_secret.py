"""A deploy keeps the spec's Alertmanager webhook URL as a 0600 secret, and nowhere it would be shown (issue 40).

The ``spec`` fixture (the sandbox's three nodes, tiny playbooks) is in this folder's conftest.py; the runs are
the recorded event streams test_deploy_pipeline.py replays.
"""

from __future__ import annotations

import stat
from pathlib import Path

from test_deploy_pipeline import Observer, Preflight, Runs

from gpuclus.deploy import pipeline
from gpuclus.errors import ExitCode
from gpuclus.secret_files import WEBHOOK_URL, secrets_directory
from gpuclus.spec.load import load_spec
from gpuclus.spec.record import MASK
from gpuclus.state import StateDir

TOKEN = "T0K3Nxoxb9f8e7d6c5"
RECEIVER = (
    "monitoring:\n  alertmanager: true\n  alert_receiver:\n"
    f"    webhook_url: https://hooks.chat.example.org/services/{TOKEN}\n"
)


def deploy(spec: Path) -> pipeline.DeployResult:
    loaded = load_spec(spec)
    assert loaded.ok, loaded.findings
    request = pipeline.DeployRequest(spec_path=spec)
    return pipeline.deploy(request, loaded, Observer(), preflight=Preflight(), start_run=Runs())


def test_a_deploy_keeps_the_url_0600_and_out_of_the_inventory_and_the_record(spec: Path) -> None:
    plain = spec.read_text()
    spec.write_text(plain + RECEIVER)
    result = deploy(spec)
    assert result.exit_code is ExitCode.OK
    secret = secrets_directory(StateDir.beside(spec)) / WEBHOOK_URL
    assert TOKEN in secret.read_text()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    # What the run hands Ansible and what it records hold the path, never the URL.
    shown = [*result.run_dir.rglob("*"), *(StateDir.beside(spec).root / "last-applied").rglob("*")]
    leaks = [path for path in shown if path.is_file() and TOKEN in path.read_text()]
    assert leaks == []
    # The run's copy of the spec is the spec as written, the URL masked.
    assert (result.run_dir / "spec.yaml").read_text() == plain + RECEIVER.replace(
        f"https://hooks.chat.example.org/services/{TOKEN}", MASK
    )

    spec.write_text(plain)  # the receiver taken out: its token does not stay behind
    assert deploy(spec).exit_code is ExitCode.OK
    assert not secret.exists()
