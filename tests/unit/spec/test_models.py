"""The spec models, the expanded topology, and the JSON schema."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gpuclus.spec.load import load_spec, load_spec_text
from gpuclus.spec.models import ClusterSpec, Fabric, NfsExport, Role
from gpuclus.spec.schema import SCHEMA_ID, spec_json_schema
from gpuclus.spec.topology import (
    DEFAULT_PARTITION,
    SlurmPartition,
    Topology,
    expand_nodes,
    slurm_partitions,
)
from gpuclus.yamldoc.document import API_VERSION
from gpuclus.yamldoc.findings import Severity

VALID = Path(__file__).resolve().parents[2] / "fixtures" / "valid"

MINIMAL: dict[str, Any] = {
    "apiVersion": "gpuclus/v1",
    "cluster": {"name": "lab", "admin_user": "ubuntu"},
    "nodes": [
        {"name": "head", "address": "10.0.0.10", "roles": ["controller", "login"]},
        {"name": "gpu[01-03]", "address": "10.0.0.[11-13]", "roles": ["compute"], "gpus": {"count": 4}},
        {"name": "cpu1", "address": "10.0.0.21", "roles": ["compute"]},
    ],
}


def _spec(**overrides: Any) -> ClusterSpec:
    return ClusterSpec.model_validate({**MINIMAL, **overrides})


def _topology(spec: ClusterSpec) -> Topology:
    topology, findings = expand_nodes(spec)
    assert findings == []
    return topology


# -- models --------------------------------------------------------------------


def test_api_version_constant_matches_the_model() -> None:
    assert API_VERSION == "gpuclus/v1"
    assert _spec().api_version == API_VERSION


def test_defaults_of_every_optional_section() -> None:
    spec = _spec()
    assert spec.nfs.exports == []
    assert spec.nfs.server_impl == "kernel"
    assert spec.nfs.client_options == "rw,hard,_netdev,x-systemd.automount"
    assert spec.slurm.version is None
    assert spec.slurm.accounting is True
    assert spec.slurm.partitions == []
    assert (spec.nvidia.driver.install, spec.nvidia.driver.branch) == (True, "550")
    assert (spec.nvidia.cuda.install, spec.nvidia.cuda.version) == (True, "12.4")
    assert (spec.containers.enroot, spec.containers.pyxis) == (False, False)
    assert (spec.monitoring.prometheus, spec.monitoring.grafana) == (True, False)
    assert (spec.network.fabric, spec.network.link_gbps, spec.network.nics_per_node) == (
        Fabric.ETHERNET,
        10,
        1,
    )


def test_node_entry_defaults() -> None:
    entry = _spec().nodes[0]
    assert (entry.gpus, entry.cpus, entry.memory_mb) == (None, None, None)
    gpus = _spec().nodes[1].gpus
    assert gpus is not None
    assert (gpus.count, gpus.model, gpus.fake) == (4, None, False)


def test_export_short_form_is_a_path() -> None:
    spec = _spec(nfs={"exports": ["/home", {"path": "/srv/data", "mount": "/data"}]})
    home, data = spec.nfs.exports
    assert home == NfsExport(path="/home")
    assert home.mount is None
    assert home.mount_point == "/home"
    assert home.options == "rw,sync,no_subtree_check"
    assert (data.path, data.mount_point) == ("/srv/data", "/data")


@pytest.mark.parametrize("path", ["home", "/my data", ""])
def test_export_path_must_be_absolute_without_spaces(path: str) -> None:
    with pytest.raises(ValidationError):
        _spec(nfs={"exports": [path]})


def test_models_forbid_unknown_keys() -> None:
    with pytest.raises(ValidationError) as raised:
        _spec(cluster={"name": "lab", "admin_user": "ubuntu", "extra": 1})
    assert raised.value.errors()[0]["type"] == "extra_forbidden"


def test_models_are_frozen() -> None:
    spec = _spec()
    with pytest.raises(ValidationError):
        spec.cluster.name = "other"  # type: ignore[misc]


def test_fields_can_be_given_by_python_name_too() -> None:
    data = {**MINIMAL}
    data["api_version"] = data.pop("apiVersion")
    assert ClusterSpec.model_validate(data).api_version == API_VERSION


def test_role_values() -> None:
    assert {role.value for role in Role} == {
        "controller",
        "compute",
        "login",
        "nfs_server",
        "monitoring",
        "backup_controller",
    }
    assert Role("nfs_server") is Role.NFS_SERVER
    assert Role.COMPUTE == "compute"


def test_fabric_values() -> None:
    assert {fabric.value for fabric in Fabric} == {"ethernet", "infiniband", "roce"}


@pytest.mark.parametrize(
    ("section", "value"),
    [
        ("slurm", {"partitions": [{"name": "gpu", "max_time": "1-12:00:00"}]}),
        ("slurm", {"partitions": [{"name": "gpu", "max_time": "90"}]}),
        ("slurm", {"partitions": [{"name": "gpu", "max_time": "INFINITE"}]}),
        ("slurm", {"version": "22.05.8"}),
        ("slurm", {"version": "24.05.1-1ubuntu1"}),
        ("network", {"fabric": "roce", "link_gbps": 3200, "nics_per_node": 16}),
        ("slurm", {"health_check": {"interval": 10, "disks": [{"path": "/", "min_free_mb": 0}]}}),
        ("slurm", {"health_check": {"enabled": False, "disks": []}}),
        ("slurm", {"health_check": {"disks": [{"path": "/var/lib/slurm", "min_free_mb": 512}], "dcgm_diag": False}}),
    ],
)
def test_accepted_values(section: str, value: dict[str, Any]) -> None:
    _spec(**{section: value})


@pytest.mark.parametrize(
    ("section", "value"),
    [
        ("slurm", {"partitions": [{"name": "gpu", "max_time": "1 day"}]}),
        ("slurm", {"partitions": [{"name": "has space"}]}),
        ("slurm", {"version": "latest"}),
        ("network", {"link_gbps": 0}),
        ("network", {"nics_per_node": 17}),
        ("nvidia", {"cuda": {"version": "12"}}),
        ("nfs", {"server_impl": "samba"}),
        ("slurm", {"health_check": {"interval": 5}}),
        ("slurm", {"health_check": {"interval": 86_401}}),
        ("slurm", {"health_check": {"disks": [{"path": "/tmp/", "min_free_mb": 1}]}}),
        ("slurm", {"health_check": {"disks": [{"path": "tmp", "min_free_mb": 1}]}}),
        ("slurm", {"health_check": {"disks": [{"path": '/x"y', "min_free_mb": 1}]}}),
        ("slurm", {"health_check": {"disks": [{"path": "/tmp", "min_free_mb": -1}]}}),
        (
            "slurm",
            {"health_check": {"disks": [{"path": "/tmp", "min_free_mb": 1}, {"path": "/tmp", "min_free_mb": 2}]}},
        ),
    ],
)
def test_refused_values(section: str, value: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _spec(**{section: value})


def test_health_check_defaults_watch_root_and_tmp() -> None:
    health = _spec().slurm.health_check
    assert (health.enabled, health.interval, health.dcgm_diag) == (True, 300, True)
    assert [(floor.path, floor.min_free_mb) for floor in health.disks] == [("/", 1024), ("/tmp", 1024)]


def test_health_check_error_names_the_line_and_the_rule() -> None:
    text = yaml.safe_dump({**MINIMAL, "slurm": {"health_check": {"disks": [{"path": "/scratch/", "min_free_mb": 1}]}}})
    errors = [finding for finding in load_spec_text(text).findings if finding.severity is Severity.ERROR]
    assert len(errors) == 1
    assert errors[0].path == "slurm.health_check.disks[0].path" and errors[0].line is not None
    assert "must be / or an absolute path" in errors[0].message


def test_gpu_count_bounds() -> None:
    nodes = [dict(MINIMAL["nodes"][0], gpus={"count": count}) for count in (1, 64)]
    assert [n.gpus.count for n in _spec(nodes=nodes).nodes if n.gpus] == [1, 64]
    for count in (0, 65):
        with pytest.raises(ValidationError):
            _spec(nodes=[dict(MINIMAL["nodes"][0], gpus={"count": count})])


# -- topology ------------------------------------------------------------------


def test_expansion_keeps_the_entry_index() -> None:
    topology = _topology(_spec())
    assert [(n.name, n.address, n.entry) for n in topology.nodes] == [
        ("head", "10.0.0.10", 0),
        ("gpu01", "10.0.0.11", 1),
        ("gpu02", "10.0.0.12", 1),
        ("gpu03", "10.0.0.13", 1),
        ("cpu1", "10.0.0.21", 2),
    ]


def test_expanded_nodes_share_their_entry_settings() -> None:
    topology = _topology(_spec())
    gpu02 = topology.by_name()["gpu02"]
    assert gpu02.roles == frozenset({Role.COMPUTE})
    assert gpu02.gpu_count == 4
    assert gpu02.has(Role.COMPUTE) and not gpu02.has(Role.CONTROLLER)
    assert topology.by_name()["cpu1"].gpu_count == 0


def test_topology_views() -> None:
    topology = _topology(_spec())
    assert topology.controller is not None and topology.controller.name == "head"
    assert [n.name for n in topology.compute] == ["gpu01", "gpu02", "gpu03", "cpu1"]
    assert [n.name for n in topology.gpu_nodes] == ["gpu01", "gpu02", "gpu03"]
    assert [n.name for n in topology.with_role(Role.LOGIN)] == ["head"]
    assert topology.with_role(Role.MONITORING) == []


@pytest.mark.parametrize("controllers", [0, 2])
def test_controller_is_none_unless_there_is_exactly_one(controllers: int) -> None:
    roles = [["controller"] if i < controllers else ["login"] for i in range(2)]
    nodes = [{"name": f"h{i}", "address": f"10.0.0.{i + 1}", "roles": roles[i]} for i in range(2)]
    assert _topology(_spec(nodes=nodes)).controller is None


def test_bad_entry_becomes_a_finding_and_is_left_out() -> None:
    nodes = [*MINIMAL["nodes"], {"name": "x[3-1]", "address": "10.0.1.[1-3]", "roles": ["compute"]}]
    topology, findings = expand_nodes(_spec(nodes=nodes))
    assert [(f.code, f.loc) for f in findings] == [("hostlist-syntax", ("nodes", 3, "name"))]
    assert all(n.entry != 3 for n in topology.nodes)
    assert len(topology.nodes) == 5


def test_address_range_of_another_length_is_a_finding() -> None:
    nodes = [{"name": "gpu[1-3]", "address": "10.0.0.[1-2]", "roles": ["compute", "controller"]}]
    topology, findings = expand_nodes(_spec(nodes=nodes))
    assert [(f.code, f.loc, f.severity) for f in findings] == [
        ("hostlist-length-mismatch", ("nodes", 0, "address"), Severity.ERROR)
    ]
    assert topology.nodes == ()


def test_bad_address_range_is_a_finding_on_the_address() -> None:
    nodes = [{"name": "gpu[1-2]", "address": "10.0.0.[1-", "roles": ["compute"]}]
    _, findings = expand_nodes(_spec(nodes=nodes))
    assert [(f.code, f.loc) for f in findings] == [("hostlist-syntax", ("nodes", 0, "address"))]


def test_default_partition_holds_every_compute_node() -> None:
    spec = _spec()
    assert slurm_partitions(spec, _topology(spec)) == [
        SlurmPartition(DEFAULT_PARTITION, ("gpu01", "gpu02", "gpu03", "cpu1"), True, "UNLIMITED")
    ]
    assert DEFAULT_PARTITION == "gpu"


def test_spec_partitions_resolve_hostlists_and_the_first_is_default() -> None:
    spec = _spec(
        slurm={
            "partitions": [
                {"name": "gpu", "nodes": "gpu[01-02]", "max_time": "1-00:00:00"},
                {"name": "all"},
            ]
        }
    )
    assert slurm_partitions(spec, _topology(spec)) == [
        SlurmPartition("gpu", ("gpu01", "gpu02"), True, "1-00:00:00"),
        SlurmPartition("all", ("gpu01", "gpu02", "gpu03", "cpu1"), False, "UNLIMITED"),
    ]


def test_marked_default_partition_wins_over_the_first() -> None:
    spec = _spec(slurm={"partitions": [{"name": "a", "nodes": "cpu1"}, {"name": "b", "default": True}]})
    assert [(p.name, p.default) for p in slurm_partitions(spec, _topology(spec))] == [
        ("a", False),
        ("b", True),
    ]


def test_loaded_spec_carries_topology_and_defaultSlurmPartition() -> None:
    result = load_spec(VALID / "minimal.yaml")
    assert result.spec is not None and result.topology is not None
    (partition,) = slurm_partitions(result.spec, result.topology)
    assert (partition.name, partition.nodes, partition.default) == ("gpu", ("ws",), True)


# -- JSON schema ---------------------------------------------------------------

_HAS_JSONSCHEMA = importlib.util.find_spec("jsonschema") is not None
needs_jsonschema = pytest.mark.skipif(
    not _HAS_JSONSCHEMA, reason="the jsonschema package is not installed in this environment"
)


def test_schema_is_json_and_names_itself() -> None:
    schema = spec_json_schema()
    assert json.loads(json.dumps(schema)) == schema
    assert schema["$id"] == SCHEMA_ID
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(schema["required"]) == {"apiVersion", "cluster", "nodes"}
    assert schema["additionalProperties"] is False
    assert "apiVersion" in schema["properties"] and "api_version" not in schema["properties"]


def test_schema_carries_field_descriptions() -> None:
    schema = spec_json_schema()
    node = schema["$defs"]["NodeEntry"]["properties"]
    assert all(prop.get("description") for prop in node.values())


@needs_jsonschema
def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(spec_json_schema())


def _schema_errors(data: Any) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(spec_json_schema())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]


@needs_jsonschema
@pytest.mark.parametrize("fixture", sorted(VALID.glob("*.yaml")), ids=lambda p: p.stem)
def test_valid_specs_pass_the_schema(fixture: Path) -> None:
    # An editor using the schema must not flag a spec that gpuclus accepts.
    assert load_spec(fixture).ok
    assert _schema_errors(yaml.safe_load(fixture.read_text(encoding="utf-8"))) == []


@needs_jsonschema
def test_schema_accepts_the_long_export_form() -> None:
    data = {**MINIMAL, "nfs": {"exports": [{"path": "/home"}]}}
    assert _schema_errors(data) == []


@needs_jsonschema
def test_schema_accepts_a_numeric_driver_branch_like_the_loader() -> None:
    text = yaml.safe_dump({**MINIMAL, "nvidia": {"driver": {"branch": 550}}})
    assert load_spec_text(text).spec is not None
    assert _schema_errors(yaml.safe_load(text)) == []


@needs_jsonschema
@pytest.mark.parametrize(
    "change",
    [
        {"apiVersion": "gpuclus/v2"},
        {"nodez": []},
        {"nodes": []},
        {"cluster": {"name": "Lab", "admin_user": "ubuntu"}},
        {"network": {"fabric": "token-ring"}},
    ],
)
def test_schema_refuses_what_the_loader_refuses(change: dict[str, Any]) -> None:
    data = {**MINIMAL, **change}
    assert not load_spec_text(yaml.safe_dump(data)).ok
    assert _schema_errors(data)
