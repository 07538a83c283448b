"""The example specs under inventories/examples/: valid, and their rendered/ trees never stale.

Those trees are the one stored copy of what render makes of the examples (test_render's syrupy snapshots
cover only its own inline specs): a reader finds them beside the spec, and this test renders each afresh.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuclus.ansible_settings import known_hosts_ssh_arg
from gpuclus.cli.main import app
from gpuclus.render import MANIFEST_NAME
from gpuclus.spec.load import load_spec
from gpuclus.yamldoc.findings import Severity

EXAMPLES = Path(__file__).resolve().parents[3] / "inventories" / "examples"

# Warnings each example is expected to carry; anything else is a regression.
EXPECTED_WARNINGS = {
    "lab-3node": set(),
    "ib-16node": set(),
    "workstation": {"controller-gpu-compute"},
}

REGENERATE = (
    "regenerate with: .venv/bin/gpuclus render inventories/examples/{name}/cluster.yaml "
    "-o inventories/examples/{name}/rendered"
)
# ansible.cfg names known_hosts by its absolute path, which depends on where the
# checkout lives: the committed examples carry /path/to/<name>/... there (a
# fresh regenerate writes the real one; either passes), and the comparison
# leaves that one value, and so ansible.cfg's hash in the manifest, out.
KNOWN_HOSTS_ARG = re.compile(rb"'UserKnownHostsFile=\"[^\"]*\"'")


def tree(directory: Path) -> dict[str, bytes]:
    files = {
        path.relative_to(directory).as_posix(): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }
    if "ansible.cfg" in files:
        files["ansible.cfg"] = KNOWN_HOSTS_ARG.sub(b"UserKnownHostsFile=KNOWN_HOSTS", files["ansible.cfg"])
    if MANIFEST_NAME in files:
        manifest = json.loads(files[MANIFEST_NAME])
        manifest["files"].pop("ansible.cfg", None)
        files[MANIFEST_NAME] = json.dumps(manifest, sort_keys=True).encode()
    return files


def test_every_example_directory_is_covered() -> None:
    found = {path.parent.name for path in EXAMPLES.glob("*/cluster.yaml")}
    assert found == set(EXPECTED_WARNINGS)


@pytest.mark.parametrize("name", sorted(EXPECTED_WARNINGS))
def test_example_passes_the_spec_check(name: str) -> None:
    loaded = load_spec(EXAMPLES / name / "cluster.yaml")
    errors = [finding for finding in loaded.findings if finding.severity is Severity.ERROR]
    assert errors == []
    assert loaded.ok
    warnings = {finding.code for finding in loaded.findings if finding.severity is Severity.WARNING}
    assert warnings == EXPECTED_WARNINGS[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_WARNINGS))
def test_committed_rendered_tree_equals_a_fresh_render(name: str, tmp_path: Path) -> None:
    # Render a copy laid out like the example, so the relative paths inside
    # the files (../.gpuclus) come out as the regenerate command makes them.
    copy = tmp_path / name
    copy.mkdir()
    shutil.copy(EXAMPLES / name / "cluster.yaml", copy / "cluster.yaml")
    result = CliRunner().invoke(app, ["render", str(copy / "cluster.yaml"), "-o", str(copy / "rendered")])
    assert result.exit_code == 0, result.output

    cfg = (copy / "rendered" / "ansible.cfg").read_text()
    assert f"{known_hosts_ssh_arg(str(copy / '.gpuclus' / 'ssh' / 'known_hosts'))}\n" in cfg
    fresh = tree(copy / "rendered")
    committed = tree(EXAMPLES / name / "rendered")
    hint = REGENERATE.format(name=name)
    assert sorted(committed) == sorted(fresh), hint
    for path, content in fresh.items():
        assert committed[path] == content, f"{name}/rendered/{path} is stale; {hint}"
