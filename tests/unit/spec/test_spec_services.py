"""Which units run on which node: spec/services' one answer, read alike by status and validate's config stage."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from status_fake_ssh import SPEC as SANDBOX_SPEC

from gpuclus.spec.load import load_spec
from gpuclus.spec.services import GRAFANA_SKIPPED, services_for
from gpuclus.status import expected as status_expected
from gpuclus.validate.checks.config import expected as config_expected

EXAMPLES = Path(__file__).resolve().parents[3] / "inventories" / "examples"
ROLES = EXAMPLES.parents[1] / "roles"
SPECS = sorted(EXAMPLES.glob("*/cluster.yaml"))


@pytest.mark.parametrize("path", [*SPECS, SANDBOX_SPEC], ids=lambda path: path.parent.name)
def test_status_and_validate_agree_on_every_node(path: Path) -> None:
    loaded = load_spec(path)
    assert loaded.spec is not None and loaded.topology is not None and loaded.ok, loaded.findings
    spec, topology = loaded.spec, loaded.topology
    for node in topology.nodes:
        judged = config_expected.services_for(node, spec, topology)
        shown = status_expected.units_for(node, spec, topology)
        # Status shows exactly the units of its list that validate judges on this node, by their Debian name.
        debian = [service.units[0] for service in judged.services]
        assert list(shown) == [unit for unit in status_expected.SHOWN if unit in debian], node.name
        assert judged.services == services_for(node, spec, topology)
        # Grafana's skip marker is read where Grafana should run, by both.
        plan = next(plan for plan in status_expected.plan(spec, topology) if plan.name == node.name)
        assert plan.grafana_marker == (GRAFANA_SKIPPED in judged.markers), node.name


def test_status_shows_only_units_some_role_starts() -> None:
    # A unit name in status' list that no service carries would never be shown: a typo, or a rename missed.
    everywhere = set()
    for path in [*SPECS, SANDBOX_SPEC]:
        loaded = load_spec(path)
        assert loaded.spec is not None and loaded.topology is not None
        for node in loaded.topology.nodes:
            everywhere |= {service.units[0] for service in services_for(node, loaded.spec, loaded.topology)}
    assert set(status_expected.SHOWN) <= everywhere


def test_the_examples_run_what_their_roles_say() -> None:
    loaded = load_spec(EXAMPLES / "ib-16node" / "cluster.yaml")
    assert loaded.spec is not None and loaded.topology is not None
    by_name = {node.name: node for node in loaded.topology.nodes}

    def names(node: str) -> list[str]:
        return [service.name for service in services_for(by_name[node], loaded.spec, loaded.topology)]  # type: ignore[arg-type]

    assert "slurmctld" in names("head2") and "slurmdbd" not in names("head2")  # the backup runs no slurmdbd
    assert {"slurmd", "nvidia-persistenced", "GPU metrics"} <= set(names("dgx01"))
    assert "slurmctld" not in names("dgx01") and "NFS server" not in names("dgx01")
    assert {"slurmdbd", "mariadb", "NFS server", "prometheus", "Slurm metrics timer"} <= set(names("head"))


def test_the_grafana_marker_is_where_the_role_writes_it() -> None:
    # roles/grafana writes the marker at its default; status and validate read GRAFANA_SKIPPED.
    defaults = yaml.safe_load((ROLES / "grafana" / "defaults" / "main.yml").read_text())
    assert defaults["grafana_skip_record"] == GRAFANA_SKIPPED
