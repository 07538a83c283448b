"""deploy/in_sync.py and the pipeline's use of it: a plain deploy runs nothing when nothing changed on either side.

The pipeline runs for real up to ansible-runner (a recorded event stream stands in for it, as in
test_deploy_pipeline.py; this folder's conftest.py gives the spec); the nodes' fingerprints come from a table
instead of SSH, since unit tests reach no node. The fingerprint script itself runs for real on this machine; on
nodes, tests/integration/test_cluster_in_sync.py.
"""

from __future__ import annotations

import re
import stat
import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel
from test_deploy_pipeline import NODES, Observer, Preflight, Runs

from gpuclus.deploy import in_sync, pipeline, records
from gpuclus.spec import models
from gpuclus.spec.load import LoadedSpec, load_spec
from gpuclus.state import StateDir


class Nodes:
    """What each node answers for its fingerprint; None: it does not answer."""

    def __init__(self) -> None:
        self.answers: dict[str, str | None] = {name: f"{index:064x}" for index, name in enumerate(NODES, 1)}
        self.asked: list[list[str]] = []

    def __call__(self, loaded: LoadedSpec, spec_path: Path, names: list[str]) -> dict[str, str | None]:
        self.asked.append(list(names))
        return {name: self.answers[name] for name in names}


def deploy(spec: Path, loaded: LoadedSpec, nodes: Nodes, runs: Runs | None = None, **options: object) -> tuple:
    observer, runs = Observer(), runs or Runs()
    options.setdefault("skip_in_sync", True)
    request = pipeline.DeployRequest(spec_path=spec, **options)  # type: ignore[arg-type]
    result = pipeline.deploy(request, loaded, observer, preflight=Preflight(), start_run=runs, fingerprints=nodes)
    return result, runs, observer


def test_a_second_plain_deploy_with_nothing_changed_runs_nothing_and_says_since_when(
    spec: Path, loaded: LoadedSpec
) -> None:
    nodes = Nodes()
    first, runs, observer = deploy(spec, loaded, nodes)
    assert len(runs.configs) == 1
    # A notice of that run's (as a role gives one: Grafana unreachable), added to its saved record.
    first.record.notices.append(records.Notice("head", "monitoring", "Grafana SKIPPED"))
    first.record.save(first.run_dir)
    # Nothing recorded yet: no node was asked before the run; after it every node was.
    assert nodes.asked == [list(NODES)]
    assert observer.seen[0] == "not-in-sync"
    assert "no full deploy recorded" in observer.verdicts[0].reason

    second, runs, observer = deploy(spec, loaded, nodes)
    assert runs.configs == []  # no Ansible, no preflight
    assert observer.seen == ["in-sync"]
    assert second.exit_code == 0
    assert second.record.status == "successful"
    assert second.record.in_sync_with == first.record.id
    saved = records.load_record(StateDir.beside(spec), second.record.id)
    assert saved is not None and saved.in_sync_with == first.record.id and saved.kind == "deploy"
    # The matched run's notices (what its roles left undone on purpose) still hold, and are said again.
    assert second.record.notices == [records.Notice("head", "monitoring", "Grafana SKIPPED")]


def test_one_changed_node_makes_it_a_full_deploy_and_names_the_node(spec: Path, loaded: LoadedSpec) -> None:
    nodes = Nodes()
    deploy(spec, loaded, nodes)
    nodes.answers["gpu02"] = "f" * 64
    result, runs, observer = deploy(spec, loaded, nodes)
    assert len(runs.configs) == 1 and runs.configs[0].limit is None  # all nodes, not just the changed one
    assert observer.verdicts[0].reason == "changed since the last full deploy: gpu02"
    assert result.record.in_sync_with is None
    # That run recorded the new state: the next deploy is in sync again.
    _, runs, _ = deploy(spec, loaded, nodes)
    assert runs.configs == []


def test_a_node_that_does_not_answer_is_never_in_sync(spec: Path, loaded: LoadedSpec) -> None:
    nodes = Nodes()
    deploy(spec, loaded, nodes)
    nodes.answers["head"] = None
    _, runs, observer = deploy(spec, loaded, nodes)
    assert len(runs.configs) == 1
    assert observer.verdicts[0].reason == "no fingerprint from head"
    # The node that did not answer after the run has no entry: its next deploy runs, and asks no node first.
    nodes.answers["head"] = "a" * 64
    nodes.asked.clear()
    _, runs, observer = deploy(spec, loaded, nodes)
    assert len(runs.configs) == 1
    assert observer.verdicts[0].reason == "no full deploy recorded for head"


def test_a_spec_change_runs_without_asking_the_nodes(spec: Path, loaded: LoadedSpec) -> None:
    nodes = Nodes()
    deploy(spec, loaded, nodes)
    spec.write_text(spec.read_text().replace("name: sbx", "name: sbx2", 1))
    changed = load_spec(spec)
    assert changed.ok
    nodes.asked.clear()
    _, runs, observer = deploy(spec, changed, nodes)
    assert len(runs.configs) == 1
    assert observer.verdicts[0].reason.startswith("the spec, gpuclus or what it hands the nodes changed")
    assert nodes.asked == [list(NODES)]  # only after the run, to record it


@pytest.mark.parametrize(
    "options",
    [{"skip_in_sync": False}, {"check": True}, {"reboot": True}, {"only": "base"}],
    ids=["full", "check", "reboot", "only"],
)
def test_only_a_plain_deploy_of_every_phase_may_be_skipped(
    spec: Path, loaded: LoadedSpec, options: dict[str, object]
) -> None:
    nodes = Nodes()
    deploy(spec, loaded, nodes)
    _, runs, observer = deploy(spec, loaded, nodes, **options)
    assert len(runs.configs) == 1
    assert not [seen for seen in observer.seen if "in-sync" in seen]


def test_runs_other_than_a_successful_full_one_forget_their_nodes(spec: Path, loaded: LoadedSpec) -> None:
    state = StateDir.beside(spec)
    nodes = Nodes()
    deploy(spec, loaded, nodes)
    assert set(in_sync.read_store(state)) == set(NODES)
    # A check run changes nothing, and keeps every entry.
    deploy(spec, loaded, nodes, check=True)
    assert set(in_sync.read_store(state)) == set(NODES)
    # Some phases on one node: that node's entry goes.
    deploy(spec, loaded, nodes, only="base", limit="gpu01")
    assert set(in_sync.read_store(state)) == {"head", "gpu02"}
    # A failed run (one that ran: --full): every node of it.
    deploy(spec, loaded, nodes, runs=Runs(stream="success", status="failed", rc=2), skip_in_sync=False)
    assert in_sync.read_store(state) == {}


def test_the_store_is_private_and_a_damaged_one_means_a_full_deploy(spec: Path, loaded: LoadedSpec) -> None:
    state = StateDir.beside(spec)
    deploy(spec, loaded, Nodes())
    path = in_sync.store_path(state)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("{not json")
    _, runs, observer = deploy(spec, loaded, Nodes())
    assert len(runs.configs) == 1
    assert observer.verdicts[0].reason.startswith("no full deploy recorded")
    path.write_text('{"nodes": {"head": {"key": 1}}}')
    assert in_sync.read_store(state) == {}


def _key(spec: Path, loaded: LoadedSpec, rendered: dict[str, str] | None = None, phases: tuple = ("base",)) -> str:
    state = StateDir.beside(spec)
    return in_sync.run_key(
        rendered if rendered is not None else {"inventory/hosts.yml": "all: {}\n"},
        phases,
        state.root / "secrets",
        state.public_key,
        in_sync.control_inputs(loaded, spec),
    )


def test_the_run_key_follows_every_input_the_nodes_get(spec: Path, loaded: LoadedSpec) -> None:
    state = StateDir.beside(spec)
    secrets = state.private_dir(state.root / "secrets")
    (secrets / "munge.key").write_bytes(b"one")
    before = _key(spec, loaded)
    assert _key(spec, loaded) == before
    # The render's comments (its header names the spec's file) are not an input; values are.
    assert _key(spec, loaded, {"inventory/hosts.yml": "# from other.yaml\nall: {}\n"}) == before
    assert _key(spec, loaded, {"inventory/hosts.yml": "all: {hosts: {}}\n"}) != before
    assert _key(spec, loaded, phases=("base", "nfs")) != before
    (secrets / "munge.key").write_bytes(b"two")
    assert _key(spec, loaded) != before
    before = _key(spec, loaded)
    state.public_key.write_text(state.public_key.read_text() + " ")
    assert _key(spec, loaded) != before


def test_control_machine_files_count_by_content_and_directories_by_listing(tmp_path: Path) -> None:
    from deploy_specs import THREE_NODE_SPEC

    credentials = tmp_path / "creds"
    credentials.write_text("machine nvcr.io login $oauthtoken password one\n")
    credentials.chmod(0o600)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    (artifacts / "enroot.deb").write_bytes(b"x" * 10)
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        THREE_NODE_SPEC.replace(
            "containers: {enroot: false, pyxis: false}",
            f"containers: {{enroot: false, pyxis: false, credentials_file: creds, artifacts_dir: {artifacts}}}",
        )
    )
    loaded = load_spec(spec)
    assert loaded.ok
    assert in_sync.control_inputs(loaded, spec) == [artifacts, credentials]
    StateDir.beside(spec).ensure_ssh_key()
    before = _key(spec, loaded)
    credentials.write_text("machine nvcr.io login $oauthtoken password two\n")
    assert _key(spec, loaded) != before
    before = _key(spec, loaded)
    (artifacts / "enroot.deb").write_bytes(b"y" * 11)
    assert _key(spec, loaded) != before


def test_every_control_machine_path_of_the_spec_is_an_input() -> None:
    """CONTROL_INPUTS names every field models._control_path checks: a new one must be added there too."""
    checked: set[tuple[str, str]] = set()
    for model in vars(models).values():
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        for decorator in model.__pydantic_decorators__.field_validators.values():
            if decorator.func is models._control_path:
                checked.update((model.__name__, field) for field in decorator.info.fields)
    listed = set()
    for fields in in_sync.CONTROL_INPUTS:
        model: type[BaseModel] = models.ClusterSpec
        for name in fields[:-1]:
            annotation = model.model_fields[name].annotation
            model = next(arg for arg in getattr(annotation, "__args__", (annotation,)) if arg is not type(None))
        listed.add((model.__name__, fields[-1]))
    assert checked, "no field validated by _control_path found: the test no longer sees the validators"
    assert listed == checked


def test_the_fingerprint_script_runs_here_and_is_stable() -> None:
    """The node's side, for real on this machine (its /etc and packages): one SHA-256, the same twice."""
    answers = [
        subprocess.run(["/bin/sh", "-c", in_sync.FINGERPRINT_SCRIPT], capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    assert re.fullmatch(r"[0-9a-f]{64}\n", answers[0].stdout), answers[0]
    assert answers[0].stdout == answers[1].stdout
