"""`gpuclus init`: flags, --from-hosts and the wizard all write a valid, commented spec."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuclus import release_checksums
from gpuclus.cli.main import app
from gpuclus.errors import UsageError
from gpuclus.initspec import (
    HostRange,
    SpecDraft,
    WizardDefaults,
    default_admin_user,
    default_cluster_name,
    draft_from_flags,
    parse_assignment,
    parse_exports,
    parse_hosts_text,
    render_spec,
    run_wizard,
)
from gpuclus.initspec.wizard import MAX_ATTEMPTS
from gpuclus.release_checksums import parse_table
from gpuclus.spec.load import LoadedSpec, load_spec, load_spec_text
from gpuclus.spec.models import Role

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"

runner = CliRunner()

CLUSTER_FLAGS = [
    "--name",
    "lab",
    "--admin-user",
    "ubuntu",
    "--controller",
    "head=10.0.0.10",
    "--compute",
    "gpu[01-04]=10.0.0.[11-14]",
    "--gpus-per-node",
    "8",
    "--gpu-model",
    "H100",
]


def invoke(args: list[str], **kwargs: object) -> tuple[int, str, str]:
    result = runner.invoke(app, ["init", *args], **kwargs)  # type: ignore[arg-type]
    return result.exit_code, result.stdout, result.stderr


def loaded(path: Path) -> LoadedSpec:
    spec = load_spec(path)
    assert spec.ok, [finding.message for finding in spec.findings]
    assert spec.spec is not None
    assert spec.topology is not None
    return spec


def roles_of(spec: LoadedSpec, name: str) -> set[Role]:
    assert spec.topology is not None
    return set(spec.topology.by_name()[name].roles)


# Flags -----------------------------------------------------------------------------------------


def test_flags_write_a_valid_commented_spec(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    code, stdout, stderr = invoke([*CLUSTER_FLAGS, "-o", str(output)])
    assert code == 0, stderr
    assert stdout == ""  # human mode talks on stderr only
    assert f"wrote {output}" in stderr
    assert "gpuclus spec check" in stderr
    assert "gpuclus render" in stderr

    spec = loaded(output)
    assert spec.spec is not None and spec.topology is not None
    assert [node.name for node in spec.topology.nodes] == ["head", "gpu01", "gpu02", "gpu03", "gpu04"]
    assert roles_of(spec, "head") == {Role.CONTROLLER, Role.NFS_SERVER, Role.MONITORING, Role.LOGIN}
    assert roles_of(spec, "gpu03") == {Role.COMPUTE}
    assert spec.topology.by_name()["head"].gpus is None
    gpu = spec.topology.by_name()["gpu04"]
    assert gpu.address == "10.0.0.14"
    assert gpu.gpus is not None and (gpu.gpus.count, gpu.gpus.model) == (8, "H100")
    assert spec.spec.cluster.name == "lab"
    assert spec.spec.cluster.admin_user == "ubuntu"
    assert [export.path for export in spec.spec.nfs.exports] == ["/shared"]
    assert spec.spec.slurm.accounting is True
    assert (spec.spec.nvidia.driver.install, spec.spec.nvidia.driver.branch) == (True, "550")
    assert (spec.spec.nvidia.cuda.install, spec.spec.nvidia.cuda.version) == (True, "12.4")
    # Off while gpuclus' table lacks Enroot's checksums (test_containers_on_once_their_downloads_are_known).
    assert not spec.spec.containers.enroot and not spec.spec.containers.pyxis
    # Grafana on: the dashboards are part of the cluster users came for.
    assert spec.spec.monitoring.prometheus and spec.spec.monitoring.grafana
    assert (spec.spec.network.fabric.value, spec.spec.network.link_gbps) == ("ethernet", 10)
    assert [finding.code for finding in spec.findings] == []

    text = output.read_text()
    assert text.startswith("apiVersion: gpuclus/v1")
    assert "branch: '550'" in text and "version: '12.4'" in text  # quoted: YAML numbers are not versions
    assert "    # - /home\n" in text
    assert "hides their own home directories" in text and "~ubuntu/.ssh/authorized_keys" in text
    lines = text.splitlines()
    for section in (
        "cluster:",
        "nodes:",
        "slurm:",
        "nfs:",
        "nvidia:",
        "containers:",
        "monitoring:",
        "network:",
    ):
        above = lines[lines.index(section) - 1]
        assert above.startswith("#"), f"{section} has no comment above it"


@pytest.mark.parametrize(("model", "branch", "cuda"), [("b200", "570", "12.8"), ("h100", "550", "12.4")])
def test_gpu_model_gets_a_driver_and_cuda_that_drive_it(tmp_path: Path, model: str, branch: str, cuda: str) -> None:
    # The defaults (550, 12.4) are too old for Blackwell: init raises them to the GPU catalogue's minimums, so
    # the spec it writes passes `spec check` (which refuses 550/12.4 for a b200); newer GPUs keep the defaults.
    output = tmp_path / "cluster.yaml"
    flags = [*CLUSTER_FLAGS[:-1], model]
    code, _, stderr = invoke([*flags, "-o", str(output)])
    assert code == 0, stderr
    spec = loaded(output)
    assert spec.spec is not None
    assert (spec.spec.nvidia.driver.branch, spec.spec.nvidia.cuda.version) == (branch, cuda)
    result = runner.invoke(app, ["spec", "check", str(output)])
    assert result.exit_code == 0, result.output


def test_grafana_is_on_and_the_comments_say_how_to_turn_it_off(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    code, _, stderr = invoke([*CLUSTER_FLAGS, "-o", str(output)])
    assert code == 0, stderr
    text = output.read_text()
    assert "  grafana: true\n" in text
    assert "To turn Grafana off: grafana: false." in text and "grafana_package:" in text
    off = text.replace("  grafana: true\n", "  grafana: false\n")
    spec = load_spec_text(off, str(output))
    assert spec.ok and spec.findings == [] and spec.spec is not None and not spec.spec.monitoring.grafana


def test_containers_on_once_their_downloads_are_known(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # With the checksums of the pinned versions' downloads in gpuclus' table, init turns Enroot and Pyxis on
    # and the spec passes `spec check` with no more input; the comments say how to turn them off.
    sha = "0123456789abcdef" * 4
    entry = {"sha256": sha, "url": "https://example.org/f", "source": "test"}
    table = parse_table({"downloads": {"enroot_4.1.2-1_amd64.deb": entry, "pyxis-0.24.0-src.tar.gz": entry}})
    monkeypatch.setattr(release_checksums, "_table", lambda: table)
    output = tmp_path / "cluster.yaml"
    code, _, stderr = invoke([*CLUSTER_FLAGS, "-o", str(output)])
    assert code == 0, stderr
    spec = loaded(output)
    assert spec.spec is not None and spec.spec.containers.enroot and spec.spec.containers.pyxis
    assert spec.findings == []
    text = output.read_text()
    assert "To turn them off: enroot: false and pyxis: false." in text
    off = text.replace("  enroot: true\n  pyxis: true\n", "  enroot: false\n  pyxis: false\n")
    assert load_spec_text(off, str(output)).findings == []


@pytest.mark.parametrize(
    ("names", "words"),
    [
        ((), "gpuclus does not know theirs yet."),
        (("pyxis-0.24.0-src.tar.gz",), "gpuclus knows Pyxis 0.24.0's, not yet Enroot 4.1.2's."),
        (("enroot_4.1.2-1_arm64.deb",), "gpuclus knows Enroot 4.1.2's, not yet Pyxis 0.24.0's."),
    ],
)
def test_containers_off_say_which_checksums_gpuclus_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...], words: str
) -> None:
    entry = {"sha256": "0123456789abcdef" * 4, "url": "https://example.org/f", "source": "test"}
    table = parse_table({"downloads": dict.fromkeys(names, entry)})
    monkeypatch.setattr(release_checksums, "_table", lambda: table)
    output = tmp_path / "cluster.yaml"
    code, _, stderr = invoke([*CLUSTER_FLAGS, "-o", str(output)])
    assert code == 0, stderr
    text = output.read_text()
    assert "  enroot: false\n  pyxis: false\n" in text
    assert f"(checksums: {{file name: sha256}}); {words}\n" in text


def test_containers_hints_turn_them_on_cleanly(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    code, _, stderr = invoke([*CLUSTER_FLAGS, "-o", str(output)])
    assert code == 0, stderr
    text = output.read_text()
    assert "  enroot: false\n  pyxis: false\n  # artifacts_dir: artifacts\n" in text
    assert "Enroot 4.1.2 and Pyxis 0.24.0" in text and "checksums:" in text
    turned_on = text.replace("  enroot: false\n  pyxis: false\n", "  enroot: true\n  pyxis: true\n")
    # Only turned on, the spec names no source: refused.
    assert [f.code for f in load_spec_text(turned_on, str(output)).findings] == ["downloads-unverified"]
    # With the hinted artifacts_dir uncommented and holding the release files, clean.
    with_dir = turned_on.replace("  # artifacts_dir: artifacts\n", "  artifacts_dir: artifacts\n")
    output.write_text(with_dir)
    assert [f.code for f in load_spec(output).findings] == ["artifacts-dir-missing"]
    (tmp_path / "artifacts").mkdir()
    for name in ("enroot-4.1.2-src.tar.gz", "pyxis-0.24.0-src.tar.gz"):
        (tmp_path / "artifacts" / name).write_bytes(b"")
    assert load_spec(output).findings == []


def test_defaults_name_from_directory_user_from_environment_and_gpu_note(tmp_path: Path) -> None:
    output = tmp_path / "dl-lab" / "cluster.yaml"
    output.parent.mkdir()
    code, _, stderr = invoke(
        ["--controller", "head=10.0.0.10", "--compute", "gpu01=10.0.0.11", "-o", str(output)],
        env={"SUDO_USER": "alice", "USER": "root"},
    )
    assert code == 0, stderr
    assert "no --gpus-per-node" in stderr and "edit gpus.count" in stderr
    spec = loaded(output)
    assert spec.spec is not None and spec.topology is not None
    assert spec.spec.cluster.name == "dl-lab"
    assert spec.spec.cluster.admin_user == "alice"
    assert spec.topology.by_name()["gpu01"].gpu_count == 1


def test_single_controller_is_a_workstation(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    code, _, stderr = invoke(
        ["--name", "ws", "--controller", "ws=ws.lab.example.com", "--gpus-per-node", "2", "-o", str(output)]
    )
    assert code == 0, stderr
    spec = loaded(output)
    assert spec.topology is not None
    assert roles_of(spec, "ws") == {
        Role.CONTROLLER,
        Role.COMPUTE,
        Role.NFS_SERVER,
        Role.MONITORING,
        Role.LOGIN,
    }
    assert spec.topology.by_name()["ws"].gpu_count == 2
    assert "controller-gpu-compute" in stderr  # shown, not hidden: spec check will say it too


def test_range_length_mismatch_is_a_usage_error(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    code, _, stderr = invoke(
        ["--controller", "head=10.0.0.10", "--compute", "gpu[01-04]=10.0.0.[11-13]", "-o", str(output)]
    )
    assert code == 2
    assert "names 4 host(s)" in stderr and "gives 3 address(es)" in stderr
    assert "hint:" in stderr
    assert not output.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--controller", "head"], "expected NAME=ADDRESS"),
        (["--controller", "head[1-2]=10.0.0.[1-2]"], "the controller is one node"),
        (["--controller", "head=10.0.0.300"], "not a valid one"),
        (["--controller", "Head=10.0.0.1"], "lower-case"),
        (["--controller", "head=10.0.0.1", "--compute", "gpu[01-=10.0.0.2"], "unbalanced brackets"),
        (["--compute", "gpu01=10.0.0.2"], "no controller given"),
        ([], "no nodes given"),
        (["--name", "Lab_1", "--controller", "head=10.0.0.1"], "--name 'Lab_1'"),
        (["--admin-user", "Bad User", "--controller", "head=10.0.0.1"], "--admin-user"),
        (["--gpu-model", "x" * 65, "--controller", "head=10.0.0.1"], "--gpu-model"),
        (["--wizard", "--controller", "head=10.0.0.1"], "--wizard asks for the nodes itself"),
    ],
)
def test_bad_flags_exit_2_with_one_line_and_a_hint(tmp_path: Path, args: list[str], message: str) -> None:
    output = tmp_path / "cluster.yaml"
    code, stdout, stderr = invoke([*args, "-o", str(output)])
    assert code == 2, stderr
    assert message in stderr
    assert "hint:" in stderr or message == "--wizard asks for the nodes itself"
    assert stdout == ""
    assert not output.exists()


def test_gpus_per_node_is_bounded_by_the_model(tmp_path: Path) -> None:
    code, _, stderr = invoke(["--controller", "head=10.0.0.1", "--gpus-per-node", "65", "-o", str(tmp_path / "c")])
    assert code == 2
    assert "--gpus-per-node" in stderr


def test_no_tty_and_no_flags_never_prompts(tmp_path: Path) -> None:
    # CliRunner's stdin is not a terminal: init must fail fast, not wait for answers.
    code, _, stderr = invoke(["-o", str(tmp_path / "cluster.yaml")], input="lab\n")
    assert code == 2
    assert "no nodes given" in stderr and "--from-hosts" in stderr


def test_refuses_to_overwrite_and_force_replaces(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    output.write_text("mine\n")
    code, _, stderr = invoke([*CLUSTER_FLAGS, "-o", str(output)])
    assert code == 2
    assert "already exists" in stderr and "--force" in stderr
    assert output.read_text() == "mine\n"

    code, _, stderr = invoke([*CLUSTER_FLAGS, "-o", str(output), "--force"])
    assert code == 0, stderr
    loaded(output)


def test_json_is_exactly_one_object(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    code, stdout, _ = invoke([*CLUSTER_FLAGS, "-o", str(output), "--json"])
    assert code == 0
    assert json.loads(stdout) == {
        "ok": True,
        "file": str(output),
        "nodes": 5,
        "gpus": 32,
        "controller": "head",
    }


def test_json_error_is_one_object_too(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    output.write_text("mine\n")
    code, stdout, stderr = invoke([*CLUSTER_FLAGS, "-o", str(output), "--json"])
    assert code == 2
    payload = json.loads(stdout)
    assert payload["ok"] is False and payload["error"]["exit_code"] == 2
    assert stderr == ""


def test_invalid_result_is_not_written(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    args = ["--controller", "head=10.0.0.11", "--compute", "gpu[01-02]=10.0.0.[11-12]", "-o", str(output)]
    code, _, stderr = invoke(args)
    assert code == 3
    assert "duplicate-address" in stderr and f"not writing {output}" in stderr
    assert not output.exists()

    code, stdout, _ = invoke([*args, "--json"])
    assert code == 3
    payload = json.loads(stdout)
    assert payload["ok"] is False
    assert [finding["code"] for finding in payload["findings"]] == ["duplicate-address"]


def test_same_flags_give_the_same_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert invoke([*CLUSTER_FLAGS, "-o", str(first)])[0] == 0
    assert invoke([*CLUSTER_FLAGS, "-o", str(second)])[0] == 0
    assert first.read_bytes() == second.read_bytes()


def test_help_is_written_for_an_admin() -> None:
    result = runner.invoke(app, ["init", "--help"])
    assert result.exit_code == 0
    assert "Examples" in result.output
    assert "--from-hosts /etc/hosts" in result.output


# --from-hosts ----------------------------------------------------------------------------------


def test_from_etc_hosts(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    code, _, stderr = invoke(
        ["--name", "lab", "--from-hosts", str(HOSTS / "etc-hosts"), "--gpus-per-node", "4", "-o", str(output)]
    )
    assert code == 0, stderr
    assert "skipped 8 entries" in stderr and "7 loopback or special" in stderr and "1 repeated name" in stderr
    assert "controller: head" in stderr
    spec = loaded(output)
    assert spec.spec is not None and spec.topology is not None
    assert [(node.name, node.address) for node in spec.topology.nodes] == [
        ("head", "10.0.0.10"),
        ("gpu01", "10.0.0.11"),
        ("gpu02", "10.0.0.12"),
        ("gpu03", "10.0.0.13"),
    ]
    assert Role.CONTROLLER in roles_of(spec, "head")
    assert roles_of(spec, "gpu02") == {Role.COMPUTE}
    # One entry per host: a file is not compressed into ranges.
    assert [entry.name for entry in spec.spec.nodes] == ["head", "gpu01", "gpu02", "gpu03"]
    assert spec.topology.by_name()["gpu03"].gpu_count == 4


def test_from_hosts_with_controller_makes_every_file_host_compute(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    code, _, stderr = invoke(
        ["--from-hosts", str(HOSTS / "list.txt"), "--controller", "mgmt=192.168.1.2", "-o", str(output)]
    )
    assert code == 0, stderr
    spec = loaded(output)
    assert spec.topology is not None
    assert [node.name for node in spec.topology.compute] == ["head", "dgx1", "dgx2", "dgx3"]
    assert spec.topology.controller is not None and spec.topology.controller.name == "mgmt"


def test_from_hosts_controller_by_name_picks_a_file_host(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    code, stdout, stderr = invoke(
        ["--from-hosts", str(HOSTS / "list.txt"), "--controller", "dgx1", "-o", str(output), "--json"]
    )
    assert code == 0, stderr
    assert json.loads(stdout)["controller"] == "dgx1"
    spec = loaded(output)
    assert spec.topology is not None
    assert [node.name for node in spec.topology.nodes] == ["dgx1", "head", "dgx2", "dgx3"]
    assert spec.topology.by_name()["dgx1"].address == "192.168.1.21"


def test_from_hosts_controller_by_name_must_be_in_the_file(tmp_path: Path) -> None:
    code, _, stderr = invoke(
        ["--from-hosts", str(HOSTS / "list.txt"), "--controller", "dgx9", "-o", str(tmp_path / "c.yaml")]
    )
    assert code == 2
    assert "is not a host of" in stderr and "dgx1, dgx2, dgx3, head" in stderr


def test_from_one_per_line_list(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    code, stdout, stderr = invoke(["--from-hosts", str(HOSTS / "list.txt"), "-o", str(output), "--json"])
    assert code == 0, stderr
    assert json.loads(stdout) == {
        "ok": True,
        "file": str(output),
        "nodes": 4,
        "gpus": 3,
        "controller": "head",
    }
    spec = loaded(output)
    assert spec.topology is not None
    assert [(node.name, node.address) for node in spec.topology.nodes] == [
        ("head", "192.168.1.10"),
        ("dgx1", "192.168.1.21"),
        ("dgx2", "dgx2.lab.example.com"),
        ("dgx3", "192.168.1.23"),
    ]


def test_from_hosts_bad_line_names_file_and_line(tmp_path: Path) -> None:
    hosts = HOSTS / "bad-line.txt"
    code, _, stderr = invoke(["--from-hosts", str(hosts), "-o", str(tmp_path / "cluster.yaml")])
    assert code == 2
    assert f"{hosts}:3:" in stderr
    assert "192.168.1.22 has no host name" in stderr


def test_from_hosts_missing_file(tmp_path: Path) -> None:
    code, _, stderr = invoke(["--from-hosts", str(tmp_path / "nope"), "-o", str(tmp_path / "cluster.yaml")])
    assert code == 2
    assert "no such file" in stderr


# initspec: the hosts parser --------------------------------------------------------------------


def test_parse_hosts_accepts_every_documented_form() -> None:
    text = "10.0.0.1 a.example.org a alias # comment\nb 10.0.0.2\n\n  # only a comment\nc.example.org\nfd00::4 d\n"
    hosts = parse_hosts_text(text, "h")
    assert [(h.name, h.address, h.line) for h in hosts.hosts] == [
        ("a", "10.0.0.1", 1),
        ("b", "10.0.0.2", 2),
        ("c", "c.example.org", 5),
        ("d", "fd00::4", 6),
    ]
    assert hosts.skipped_summary() is None


@pytest.mark.parametrize(
    "line",
    [
        "127.0.0.1 localhost",
        "127.0.1.1 myhost",
        "::1 ip6-localhost",
        "fe00::0 ip6-localnet",
        "ff00::0 ip6-mcastprefix",
        "ff02::2 ip6-allrouters",
        "10.9.9.9 localhost.localdomain",
        "localhost",
        "0.0.0.0 blocked",
    ],
)
def test_parse_hosts_skips_loopback_and_special_entries(line: str) -> None:
    hosts = parse_hosts_text(f"{line}\n10.0.0.1 node1\n", "h")
    assert [h.name for h in hosts.hosts] == ["node1"]
    assert [s.line for s in hosts.skipped] == [1]
    assert hosts.skipped_summary() == "skipped 1 entry of h (1 loopback or special)"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("10.0.0.5", "has no host name"),
        ("10.0.0.5 10.0.0.6", "not another address"),
        ("node1 node2 node3", "3 fields"),
        ("10.0.0.300 node1", "not a valid one"),
        ("node1 10.0.0.300", "not a valid one"),
        ("10.0.0.5 GPU01", "lower-case"),
        ("10.0.0.5 bad_name", "invalid DNS label"),
        ("10.0.0.1 other", "already node1's (line 1)"),
    ],
)
def test_parse_hosts_bad_line_names_the_line(line: str, reason: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_hosts_text(f"10.0.0.1 node1\n# comment\n{line}\n", "hosts.txt")
    assert caught.value.message.startswith("hosts.txt:3: ")
    assert reason in caught.value.message
    assert caught.value.hint


def test_parse_hosts_with_nothing_usable() -> None:
    with pytest.raises(UsageError, match="no hosts to use"):
        parse_hosts_text("127.0.0.1 localhost\n::1 ip6-localhost\n", "h")
    with pytest.raises(UsageError, match="no hosts to use"):
        parse_hosts_text("# empty\n", "h")


# initspec: flags and plans ---------------------------------------------------------------------


def test_parse_assignment() -> None:
    assert parse_assignment("gpu[1-3]=10.0.1.[1-3]", single=False) == HostRange("gpu[1-3]", "10.0.1.[1-3]", 3)
    assert parse_assignment(" head = h.example.org ", single=True) == HostRange("head", "h.example.org", 1)
    with pytest.raises(ValueError, match="one node"):
        parse_assignment("gpu[1-3]=10.0.1.[1-3]", single=True)


def test_draft_from_flags_refuses_a_controller_at_another_address_than_the_file() -> None:
    with pytest.raises(UsageError, match=r"gives head the address 10\.0\.0\.10"):
        draft_from_flags(
            name="lab",
            admin_user="ubuntu",
            controller="head=10.0.0.99",
            compute=[],
            file_hosts=[HostRange("head", "10.0.0.10", 1)],
            file_source="hosts",
        )


def test_parse_exports() -> None:
    assert parse_exports("/shared, /data/ /shared") == ("/shared", "/data")
    assert parse_exports("none") == ()
    assert parse_exports("") == ()
    with pytest.raises(ValueError, match="absolute path"):
        parse_exports("shared")


def test_no_exports_means_no_nfs_server_and_no_warning() -> None:
    draft = SpecDraft("lab", "ubuntu", HostRange("head", "10.0.0.1", 1), (HostRange("n1", "10.0.0.2", 1),), exports=())
    text = render_spec(draft)
    assert "  exports: []\n" in text
    spec = load_spec_text(text)
    assert spec.ok
    assert [finding.code for finding in spec.findings if finding.severity.value != "info"] == []
    assert spec.topology is not None and Role.NFS_SERVER not in roles_of(spec, "head")


def test_exported_home_loses_its_commented_line() -> None:
    draft = SpecDraft("lab", "ubuntu", HostRange("head", "10.0.0.1", 1), exports=("/home", "/shared"))
    text = render_spec(draft)
    assert "    - /home\n" in text and "# - /home" not in text
    assert load_spec_text(text).ok


def test_default_cluster_name(tmp_path: Path) -> None:
    assert default_cluster_name(tmp_path / "dl-lab" / "cluster.yaml") == "dl-lab"
    assert default_cluster_name(tmp_path / "DL_Lab" / "cluster.yaml") == "gpu-cluster"
    assert default_cluster_name(Path("/cluster.yaml")) == "gpu-cluster"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"SUDO_USER": "alice", "USER": "root"}, "alice"),
        ({"USER": "bob"}, "bob"),
        ({"SUDO_USER": "Not Valid", "USER": "carol"}, "carol"),
        ({"USER": "Dave Smith"}, "root"),
        ({}, "root"),
    ],
)
def test_default_admin_user(environ: dict[str, str], expected: str) -> None:
    assert default_admin_user(environ) == expected


# initspec: the wizard with scripted answers ----------------------------------------------------


@dataclass
class Script:
    """Answers in order; None takes the question's default. Records what was asked and told."""

    answers: list[str | None]
    confirms: list[bool] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    told: list[str] = field(default_factory=list)

    def ask(self, question: str, default: str | None) -> str:
        self.asked.append(question)
        answer = self.answers.pop(0)
        if answer is None:
            assert default is not None, f"{question!r} has no default"
            return default
        return answer

    def confirm(self, question: str, default: bool) -> bool:
        self.asked.append(question)
        return self.confirms.pop(0)

    def tell(self, text: str) -> None:
        self.told.append(text)

    def run(self) -> SpecDraft:
        draft = run_wizard(self.ask, self.confirm, self.tell, WizardDefaults(name="lab", admin_user="ubuntu"))
        assert self.answers == [] and self.confirms == [], "not every scripted answer was used"
        return draft


def test_wizard_builds_a_cluster_and_reasks_bad_answers() -> None:
    script = Script(
        [
            None,  # cluster name: the default
            "ops",
            "head",
            "10.0.0.300",  # refused, asked again
            "10.0.0.10",
            "gpu[01-02]",
            "10.0.0.[11-13]",  # three addresses for two names: asked again
            "10.0.0.[11-12]",
            "big[1-2]",
            "big[1-2].lab.example.org",  # the range applies to DNS names too
            "",
            "8",
            "A100",
            None,  # exports: the default /shared
        ]
    )
    draft = script.run()
    assert (draft.name, draft.admin_user) == ("lab", "ops")
    assert draft.controller == HostRange("head", "10.0.0.10", 1)
    assert draft.compute == (
        HostRange("gpu[01-02]", "10.0.0.[11-12]", 2),
        HostRange("big[1-2]", "big[1-2].lab.example.org", 2),
    )
    assert (draft.gpus_per_node, draft.gpu_model, draft.exports) == (8, "A100", ("/shared",))
    assert len(script.told) == 2
    assert "not a valid one" in script.told[0]
    assert "gives 3 address(es)" in script.told[1]
    spec = load_spec_text(render_spec(draft))
    assert spec.ok and spec.topology is not None
    assert spec.topology.by_name()["big2"].address == "big2.lab.example.org"


def test_wizard_without_compute_nodes_asks_for_a_workstation() -> None:
    script = Script(["lab", "ubuntu", "ws", "192.168.1.5", "", "", "2", "", "none"], confirms=[False, True])
    draft = script.run()
    assert draft.workstation and draft.exports == ()
    assert draft.controller_roles == (Role.CONTROLLER, Role.COMPUTE, Role.MONITORING, Role.LOGIN)
    assert sum("workstation" in question for question in script.asked) == 2


def test_wizard_warns_before_sharing_home() -> None:
    script = Script(
        ["lab", "ubuntu", "head", "10.0.0.1", "n1", "10.0.0.2", "", "1", "", "/home /shared", "/home"],
        confirms=[False, True],
    )
    draft = script.run()
    assert draft.exports == ("/home",)
    assert any("~ubuntu/.ssh/authorized_keys" in question for question in script.asked)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("Lab", "lower-case letter"),
        ("eight", "whole number"),
        ("0", "between 1 and 64"),
        ("NVIDIA H100", "without spaces"),
    ],
)
def test_wizard_reasks_each_kind_of_bad_answer(bad: str, reason: str) -> None:
    answers: list[str | None] = ["lab", "ubuntu", "head", "10.0.0.1", "n1", "10.0.0.2", "", "1", "", None]
    position = {"Lab": 0, "eight": 7, "0": 7, "NVIDIA H100": 8}[bad]
    answers.insert(position, bad)
    script = Script(answers)
    script.run()
    assert len(script.told) == 1 and reason in script.told[0]


def test_wizard_gives_up_after_too_many_bad_answers() -> None:
    script = Script(["Bad Name"] * MAX_ATTEMPTS)
    with pytest.raises(UsageError, match="no usable answer"):
        script.run()


# The wizard through the CLI --------------------------------------------------------------------

WIZARD_ANSWERS = [
    "Lab!",  # refused: not a cluster name
    "lab",
    "ubuntu",
    "head",
    "10.0.0.10",
    "gpu[01-02]",
    "10.0.0.[11-12]",
    "",
    "4",
    "H100",
    "",  # exports: the default
]


def test_wizard_through_the_cli(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    result = runner.invoke(app, ["init", "--wizard", "-o", str(output)], input="\n".join(WIZARD_ANSWERS) + "\n")
    assert result.exit_code == 0, result.output
    assert "'Lab!' cannot be used" in result.stderr
    assert "Cluster name" in result.stderr  # prompts go to stderr, keeping stdout for --json
    spec = loaded(output)
    assert spec.spec is not None and spec.topology is not None
    assert spec.spec.cluster.name == "lab"
    assert [node.name for node in spec.topology.compute] == ["gpu01", "gpu02"]
    assert spec.topology.by_name()["gpu02"].gpus is not None
    assert [export.path for export in spec.spec.nfs.exports] == ["/shared"]


def test_wizard_answers_that_make_the_spec_invalid_write_nothing(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    answers = list(WIZARD_ANSWERS)
    answers[answers.index("10.0.0.[11-12]")] = "10.0.0.[10-11]"  # gpu01 takes the controller's address
    result = runner.invoke(app, ["init", "--wizard", "-o", str(output)], input="\n".join(answers) + "\n")
    assert result.exit_code == 3, result.output
    assert "duplicate-address" in result.stderr
    assert not output.exists()


def test_wizard_refuses_an_existing_file_before_asking(tmp_path: Path) -> None:
    output = tmp_path / "cluster.yaml"
    output.write_text("mine\n")
    result = runner.invoke(app, ["init", "--wizard", "-o", str(output)], input="lab\n")
    assert result.exit_code == 2
    assert "Cluster name" not in result.stderr


# Not "0123": digits alone are no host name (the resolver reads them as an address), so init refuses them.
@pytest.mark.parametrize("name", ["on", "null", "no", "1e3"])
def test_values_yaml_would_misread_are_quoted(name: str) -> None:
    draft = SpecDraft(
        "lab", "ubuntu", HostRange("head", "10.0.0.10", 1), (HostRange(name, "10.0.0.11", 1),), gpu_model="yes"
    )
    spec = load_spec_text(render_spec(draft))
    assert spec.ok and spec.spec is not None and spec.topology is not None
    assert spec.topology.compute[0].name == name
    assert spec.spec.nodes[1].gpus is not None and spec.spec.nodes[1].gpus.model == "yes"
