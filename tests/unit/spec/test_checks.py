"""Every finding code has a fixture that triggers it, at the right line and path.

Each file ``tests/fixtures/invalid/<code>.yaml`` starts with a header comment::

    # expect: <code> line <N> path <path>

The files under ``tests/fixtures/invalid/together/`` start with one such line
per finding and must give exactly those findings: structure and meaning
problems reported together, with nothing that only follows from a part the
schema refused.

``<N>`` is the 1-based line the problem is written on, or ``-`` when the finding
has no line (a file of comments has nothing to point at). ``<path>`` is
``Finding.path`` as printed, so a document-level finding reads ``(document)``.
The level expected is the one the CODES registry declares for the code.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpuclus.spec.checks.codes import CODES
from gpuclus.spec.checks.registry import CHECKS, run_checks
from gpuclus.spec.checks.view import NODES, PARTITIONS, SpecView
from gpuclus.spec.load import LoadedSpec, load_spec, load_spec_text
from gpuclus.yamldoc.findings import Finding, Severity, has_errors, sort_findings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
INVALID = FIXTURES / "invalid"
TOGETHER = INVALID / "together"
VALID = FIXTURES / "valid"

_HEADER = re.compile(r"^# expect: (?P<code>[a-z0-9-]+) line (?P<line>\d+|-) path (?P<path>\S+)$")


@dataclass(frozen=True)
class Expectation:
    code: str
    line: int | None
    path: str


def _expectation(fixture: Path) -> Expectation:
    first = fixture.read_text(encoding="utf-8").splitlines()[0]
    match = _HEADER.match(first)
    assert match, f"{fixture.name}: first line must be '# expect: CODE line N|- path PATH', not {first!r}"
    line = None if match["line"] == "-" else int(match["line"])
    return Expectation(match["code"], line, match["path"])


def _describe(findings: list[Finding]) -> str:
    return "\n".join(f"  {f.code} {f.severity.value} line={f.line} path={f.path}: {f.message}" for f in findings)


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_code_has_a_fixture_that_triggers_it(code: str) -> None:
    fixture = INVALID / f"{code}.yaml"
    assert fixture.is_file(), f"no fixture for code {code!r}: add tests/fixtures/invalid/{code}.yaml"
    expected = _expectation(fixture)
    assert expected.code == code, f"{fixture.name} declares code {expected.code!r}"
    level, _summary = CODES[code]

    result = load_spec(fixture)

    matching = [
        f
        for f in result.findings
        if f.code == code and f.line == expected.line and f.path == expected.path and f.severity is level
    ]
    assert matching, (
        f"expected {code} ({level.value}) at line {expected.line}, path {expected.path}; got:\n"
        + _describe(result.findings)
    )
    for finding in matching:
        assert finding.message.strip()
        # Every check in spec/checks/ and every loader finding gives a hint; schema
        # findings use the field's description, which all fixtures' fields have.
        assert finding.hint and finding.hint.strip(), f"{code} finding has no hint"
        if finding.line is not None:
            written = fixture.read_text(encoding="utf-8").splitlines()[finding.line - 1]
            assert finding.source_line == written


@pytest.mark.parametrize("fixture", sorted(INVALID.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_finding_names_its_file(fixture: Path) -> None:
    # Output prints `file:line:`; a finding without a file reads `spec:` instead.
    findings = load_spec(fixture).findings
    assert findings
    assert [f.file for f in findings] == [str(fixture)] * len(findings)


def test_no_fixture_for_a_code_that_does_not_exist() -> None:
    stale = sorted(p.stem for p in INVALID.glob("*.yaml") if p.stem not in CODES)
    assert not stale, f"fixtures for codes that are not in CODES: {stale}"


def test_codes_registry_levels_and_summaries() -> None:
    for code, (level, summary) in CODES.items():
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", code), code
        assert isinstance(level, Severity)
        assert summary and not summary.endswith(".")


def test_every_semantic_finding_has_a_registered_code_and_level() -> None:
    # Findings from all fixtures together cover every check; none may invent a
    # code or a level other than the registry's.
    for fixture in sorted(INVALID.glob("*.yaml")):
        for finding in load_spec(fixture).findings:
            assert finding.code in CODES, f"{fixture.name}: unregistered code {finding.code!r}"
            assert finding.severity is CODES[finding.code][0], f"{fixture.name}: {finding.code} at wrong level"


# -- valid specs ---------------------------------------------------------------


VALID_SPECS = sorted(VALID.glob("*.yaml"))


def test_the_valid_fixtures_exist() -> None:
    assert {p.stem for p in VALID_SPECS} >= {"minimal", "full", "anchors"}


@pytest.mark.parametrize("fixture", VALID_SPECS, ids=lambda p: p.stem)
def test_valid_spec_loads_without_errors_or_warnings(fixture: Path) -> None:
    result = load_spec(fixture)
    problems = [f for f in result.findings if f.severity is not Severity.INFO]
    assert not problems, _describe(problems)
    assert result.ok
    assert result.spec is not None and result.topology is not None


def test_minimal_spec_only_notes_that_it_has_no_gpus() -> None:
    result = load_spec(VALID / "minimal.yaml")
    assert [f.code for f in result.findings] == ["no-gpu-nodes"]


def test_full_spec_is_clean_and_uses_every_section() -> None:
    result = load_spec(VALID / "full.yaml")
    assert result.findings == []
    data = result.document.data
    assert set(data) == {
        "apiVersion",
        "cluster",
        "nodes",
        "slurm",
        "nfs",
        "nvidia",
        "containers",
        "monitoring",
        "network",
    }
    assert result.topology is not None
    assert [n.name for n in result.topology.compute] == [f"gpu{i:02d}" for i in range(1, 7)]
    assert result.topology.by_name()["gpu06"].address == "gpu06.lab.example.org"


def test_anchor_spec_resolves_aliases_and_merge_keys() -> None:
    result = load_spec(VALID / "anchors.yaml")
    assert result.findings == []
    assert result.spec is not None
    merged = result.spec.nodes[2].gpus
    assert merged is not None
    assert (merged.count, merged.model, merged.fake) == (8, "H100", False)
    assert result.spec.nodes[3].gpus == result.spec.nodes[1].gpus
    assert [n.roles for n in result.spec.nodes[1:]] == [result.spec.nodes[1].roles] * 3


# -- all findings at once ------------------------------------------------------

BASE = """\
apiVersion: gpuclus/v1
cluster:
  name: lab
  admin_user: ubuntu
nodes:
  - name: head
    address: 10.0.0.10
    roles: [controller, nfs_server, monitoring, login]
  - name: gpu[01-02]
    address: 10.0.0.[11-12]
    roles: [compute]
    gpus: {count: 2}
nfs:
  exports: [/home]
"""


def _codes(result: LoadedSpec) -> list[tuple[str, int | None, str]]:
    return sorted((f.code, f.line, f.path) for f in result.findings)


def test_base_spec_is_clean() -> None:
    assert load_spec_text(BASE).findings == []


def test_five_schema_problems_give_five_findings() -> None:
    text = """\
apiVersion: gpuclus/v1
cluster:
  name: Lab
  admin_user: ubuntu
nodes:
  - name: head
    address: 10.0.0.10
    roles: [controller, nfs_server, monitoring, login, gpu]
  - name: gpu[01-02]
    address: 10.0.0.[11-12]
    roles: [compute]
    gpus: {count: 0}
    memroy_mb: 1024
slurm:
  accounting: maybe
nfs:
  exports: [/home]
"""
    result = load_spec_text(text)
    assert _codes(result) == [
        ("invalid-choice", 8, "nodes[0].roles[4]"),
        ("invalid-format", 3, "cluster.name"),
        ("out-of-range", 12, "nodes[1].gpus.count"),
        ("unknown-key", 13, "nodes[1].memroy_mb"),
        ("wrong-type", 15, "slurm.accounting"),
    ]
    assert result.spec is None
    assert not result.ok


def test_five_semantic_problems_give_five_findings() -> None:
    text = """\
apiVersion: gpuclus/v1
cluster:
  name: lab
  admin_user: ubuntu
nodes:
  - name: head
    address: 10.0.0.11
    roles: [controller, monitoring, login]
  - name: gpu[01-02]
    address: 10.0.0.[11-12]
    roles: [compute, compute]
    gpus: {count: 2}
slurm:
  partitions:
    - {name: a, default: true}
    - {name: b, default: true}
nfs:
  exports: [/home]
containers: {enroot: false, pyxis: true, allow_unverified_downloads: true}
"""
    result = load_spec_text(text)
    assert _codes(result) == [
        ("duplicate-address", 10, "nodes[1].address"),
        ("duplicate-role", 11, "nodes[1].roles"),
        ("multiple-default-partitions", 16, "slurm.partitions[1].default"),
        ("nfs-server-missing", 18, "nfs.exports"),
        ("pyxis-without-enroot", 19, "containers.pyxis"),
    ]
    # Errors come first, then by line.
    assert [f.severity for f in result.findings] == [Severity.ERROR] * 4 + [Severity.WARNING]
    assert [f.line for f in result.findings[:4]] == [10, 16, 18, 19]
    assert result.spec is not None  # structure was fine; only the meaning is wrong
    assert not result.ok


def test_every_check_runs_even_when_an_earlier_one_fails() -> None:
    result = load_spec_text(BASE.replace("[controller, nfs_server, monitoring, login]", "[login]"))
    codes = {f.code for f in result.findings}
    # controller-count is the first check; the checks after it still report.
    assert {"controller-count", "nfs-server-missing"} <= codes
    assert result.spec is not None and result.topology is not None
    assert len(run_checks(SpecView.whole(result.spec, result.topology))) >= 2
    assert len(CHECKS) >= 10


def test_warnings_and_infos_alone_keep_the_spec_ok() -> None:
    result = load_spec_text(BASE.replace("roles: [compute]", "roles: [compute, compute]"))
    assert [f.code for f in result.findings] == ["duplicate-role"]
    assert not has_errors(result.findings)
    assert result.ok


def test_no_controller_points_at_the_nodes_list() -> None:
    result = load_spec_text(BASE.replace("controller, ", ""))
    finding = next(f for f in result.findings if f.code == "controller-count")
    assert (finding.line, finding.path) == (5, "nodes")
    assert "no node" in finding.message


def test_invalid_node_name_is_reported_once_per_entry() -> None:
    result = load_spec_text(BASE.replace("gpu[01-02]", "GPU[01-02]"))
    found = [f for f in result.findings if f.code == "invalid-node-name"]
    assert len(found) == 1
    assert found[0].path == "nodes[1].name"


def test_partition_hostlist_syntax_error_points_at_the_partition() -> None:
    text = BASE + "slurm:\n  partitions:\n    - name: gpu\n      nodes: gpu[01-\n"
    result = load_spec_text(text)
    found = [f for f in result.findings if f.code == "hostlist-syntax"]
    assert [(f.line, f.path) for f in found] == [(18, "slurm.partitions[0].nodes")]


def test_partition_without_nodes_covers_every_compute_node() -> None:
    text = BASE + "slurm:\n  partitions:\n    - name: all\n"
    assert load_spec_text(text).findings == []


def test_dns_addresses_are_accepted() -> None:
    text = BASE.replace("10.0.0.[11-12]", "gpu[01-02].example.org")
    assert load_spec_text(text).findings == []


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("10.0.0.300", "not a valid one"),
        ("fd00::zz", "not a valid address"),
        ("fd00::10", "IPv6 address, which gpuclus does not support yet"),
        ("fe80::1%eth0", "IPv6"),
        ("0.0.0.0", "not the address of one host"),
        ("224.0.0.1", "not the address of one host"),
        ("-bad.example.org", "DNS label"),
        ("a" * 254, "253"),
    ],
)
def test_invalid_addresses_say_why(address: str, problem: str) -> None:
    result = load_spec_text(BASE.replace("10.0.0.10", f"'{address}'"))
    found = [f for f in result.findings if f.code == "invalid-address"]
    assert len(found) == 1 and problem in found[0].message
    assert (found[0].line, found[0].path) == (7, "nodes[0].address")


def test_sort_findings_puts_errors_first_then_lines() -> None:
    text = BASE.replace("roles: [compute]", "roles: [compute, compute]").replace("nfs_server, ", "")
    result = load_spec_text(text)
    assert sort_findings(list(reversed(result.findings))) == result.findings
    severities = [f.severity for f in result.findings]
    assert severities == sorted(severities, key=[Severity.ERROR, Severity.WARNING, Severity.INFO].index)


def test_finding_as_dict_is_json_ready() -> None:
    result = load_spec_text(BASE.replace("count: 2", "count: 0"), path="lab.yaml")
    (finding,) = result.findings
    assert finding.as_dict() == {
        "code": "out-of-range",
        "level": "error",
        "path": "nodes[1].gpus.count",
        "message": finding.message,
        "hint": finding.hint,
        "file": "lab.yaml",
        "line": 12,
        "column": 19,
    }


def test_overlapping_ranges_are_reported_once_per_entry() -> None:
    # Like invalid-node-name and invalid-address, a repeated range is one
    # mistake: one finding for the entry, not one per host (and per address).
    def spec(size: int) -> str:
        entry = f"  - name: gpu[1-{size}]\n    address: gpu[1-{size}].lab\n    roles: [compute]\n"
        return BASE.replace("  - name: gpu[01-02]", entry + entry + "  - name: gpu[01-02]")

    assert [(f.code, f.path) for f in load_spec_text(spec(2)).findings] == [
        ("duplicate-node-name", "nodes[2].name"),
        ("duplicate-address", "nodes[2].address"),
    ]
    big = load_spec_text(spec(2000)).findings
    assert sorted(f.code for f in big) == ["duplicate-address", "duplicate-node-name"]


# -- structure and meaning together --------------------------------------------


def _expectations(fixture: Path) -> list[Expectation]:
    headers = [line for line in fixture.read_text(encoding="utf-8").splitlines() if line.startswith("# expect:")]
    assert headers, f"{fixture.name}: no '# expect:' lines"
    expected = []
    for header in headers:
        match = _HEADER.match(header)
        assert match, f"{fixture.name}: {header!r} is not '# expect: CODE line N|- path PATH'"
        expected.append(Expectation(match["code"], None if match["line"] == "-" else int(match["line"]), match["path"]))
    return expected


TOGETHER_FIXTURES = sorted(TOGETHER.glob("*.yaml"))


def test_the_together_fixtures_exist() -> None:
    assert {p.stem for p in TOGETHER_FIXTURES} >= {"unknown-key-and-unknown-node", "huge-range", "failed-entries"}


@pytest.mark.parametrize("fixture", TOGETHER_FIXTURES, ids=lambda p: p.stem)
def test_structure_and_meaning_findings_come_together_and_nothing_else(fixture: Path) -> None:
    result = load_spec(fixture)
    got = sorted((f.code, f.line, f.path) for f in result.findings)
    expected = sorted((e.code, e.line, e.path) for e in _expectations(fixture))
    assert got == expected, _describe(result.findings)
    assert not result.ok


def test_a_typo_in_a_section_leaves_the_node_checks_running() -> None:
    text = BASE.replace("nfs_server, ", "") + "monitoring:\n  promethus: true\n"
    result = load_spec_text(text)
    assert _codes(result) == [("nfs-server-missing", 14, "nfs.exports"), ("unknown-key", 16, "monitoring.promethus")]
    # Only the check that reads the monitoring section waits for the fix.
    assert result.skipped_checks == ["monitoring_on_controller", "monitoring_parts_unused", "webhook_url_file"]
    assert result.spec is None and result.topology is None


def test_a_mistyped_section_is_not_read_as_its_defaults() -> None:
    # Without the typo nfs.exports holds /home; read as empty, it would give
    # nfs-server-without-exports, which only follows from the typo.
    result = load_spec_text(BASE.replace("nfs:\n", "nsf:\n"))
    assert _codes(result) == [("unknown-key", 13, "nsf")]
    assert "did you mean 'nfs'?" in (result.findings[0].hint or "")
    assert load_spec_text(BASE.replace("nfs:\n", "zzz:\n")).findings[-1].code == "nfs-server-without-exports"


def test_a_failed_key_hides_its_whole_value_from_the_checks() -> None:
    # driver.branch fails, so the driver mapping is dropped and install would
    # read as its default (true): the fake-GPU warning must not fire on that.
    text = BASE.replace("gpus: {count: 2}", "gpus: {count: 2, fake: true}") + (
        "nvidia:\n  driver: {install: false, branch: x}\n  cuda: {install: false}\n"
    )
    assert _codes(load_spec_text(text)) == [("invalid-format", 16, "nvidia.driver.branch")]
    assert [f.code for f in load_spec_text(text.replace("branch: x", "branch: '550'")).findings] == []


def test_a_spec_for_another_version_gets_no_checks_of_meaning() -> None:
    # Its rules are not v1's; judging it by them would mislead.
    result = load_spec_text(BASE.replace("gpuclus/v1", "gpuclus/v2").replace("controller, ", ""))
    assert [f.code for f in result.findings] == ["api-version"]


def test_a_missing_api_version_still_gets_checks_of_meaning() -> None:
    result = load_spec_text(BASE.replace("apiVersion: gpuclus/v1\n", "").replace("controller, ", ""))
    assert {f.code for f in result.findings} == {"api-version", "controller-count"}


def test_a_partition_hostlist_error_does_not_call_nodes_idle() -> None:
    text = BASE + "slurm:\n  partitions:\n    - {name: gpu, nodes: 'gpu[01-'}\n"
    assert [f.code for f in load_spec_text(text).findings] == ["hostlist-syntax"]


def test_no_node_list_leaves_only_the_structure_finding() -> None:
    for nodes in ("nodes: []\n", "nodes: head\n", ""):
        text = "apiVersion: gpuclus/v1\ncluster: {name: lab, admin_user: ubuntu}\n" + nodes
        result = load_spec_text(text)
        assert len(result.findings) == 1, _describe(result.findings)
        assert result.findings[0].code in {"out-of-range", "wrong-type", "missing-field"}


def test_spec_check_says_that_checks_wait_for_the_structure_fix() -> None:
    from typer.testing import CliRunner

    from gpuclus.cli.main import app

    result = CliRunner().invoke(app, ["spec", "check", str(TOGETHER / "huge-range.yaml")])
    assert result.exit_code == 3
    assert "error[hostlist-syntax] nodes[1].name" in result.output
    assert "10 checks of meaning need a part refused above; they run once it is fixed" in result.output
    clean = CliRunner().invoke(app, ["spec", "check", str(VALID / "full.yaml")])
    assert clean.exit_code == 0 and "of meaning" not in clean.output


def test_a_sound_spec_skips_no_check() -> None:
    result = load_spec(VALID / "full.yaml")
    assert result.skipped_checks == []


def test_spec_view_parts_overlap_both_ways() -> None:
    result = load_spec(VALID / "full.yaml")
    assert result.spec is not None and result.topology is not None
    whole = SpecView.whole(result.spec, result.topology)
    assert whole.is_whole(NODES) and whole.is_whole(PARTITIONS)
    view = SpecView(whole.spec, whole.topology, whole.entries, frozenset({("nodes", 1), ("slurm",)}))
    assert not view.is_whole(NODES)  # an entry lies in the list
    assert not view.is_whole(PARTITIONS)  # the section holds the partitions
    assert view.is_whole(("nfs", "exports"))
    assert [check.name for check in CHECKS if not check.needs]  # some checks take the parsed entries as they are


def _mappings(value: object, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every mapping's path in ``value``, the document itself first."""
    found = []
    if isinstance(value, dict):
        found.append(path)
        for key, item in value.items():
            found.extend(_mappings(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_mappings(item, (*path, index)))
    return found


def _at(data: object, path: tuple[str | int, ...]) -> object:
    for part in path:
        data = data[part]  # type: ignore[index]
    return data


FULL = yaml.safe_load((VALID / "full.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", _mappings(FULL), ids=lambda path: ".".join(map(str, path)) or "document")
def test_an_unknown_key_anywhere_in_a_clean_spec_is_its_only_finding(path: tuple[str | int, ...]) -> None:
    # full.yaml has no finding, so anything beside the unknown key would be a
    # follow-on of the part it makes unsound.
    data = copy.deepcopy(FULL)
    _at(data, path)["typo_key"] = 1  # type: ignore[index]
    result = load_spec_text(yaml.safe_dump(data, sort_keys=False))
    assert [(f.code, f.loc) for f in result.findings] == [("unknown-key", (*path, "typo_key"))], _describe(
        result.findings
    )


@pytest.mark.parametrize("index", range(len(FULL["nodes"])))
@pytest.mark.parametrize("broken", ["wrong type", "huge range"])
def test_a_refused_node_entry_of_a_clean_spec_is_its_only_finding(index: int, broken: str) -> None:
    data = copy.deepcopy(FULL)
    if broken == "wrong type":
        data["nodes"][index]["roles"] = 5
        expected = [("wrong-type", ("nodes", index, "roles"))]
    else:
        entry = data["nodes"][index]
        entry["name"], entry["address"] = "n[0-100000]", "n[0-100000].lab"
        expected = [("hostlist-syntax", ("nodes", index, "name"))]
    result = load_spec_text(yaml.safe_dump(data, sort_keys=False))
    assert [(f.code, f.loc) for f in result.findings] == expected, _describe(result.findings)
