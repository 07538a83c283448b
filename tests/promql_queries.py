"""Every PromQL expression gpuclus ships: Grafana dashboard panels, their template variables, alert rules.

Tests evaluate each one against a real Prometheus: the unit tests against a
throwaway one (parse errors; GPU queries on synthetic DCGM series), the
integration test against the sandbox cluster's (node and Slurm panels must
return data there). This module only finds and prepares the expressions:

    for query in all_queries(repo):
        promql = expand(query.expr)           # Grafana's $variables -> values Prometheus accepts
        query.kind                            # "node", "slurm", "gpu" or "other" (by metric names)
        query.may_be_empty                    # why a healthy cluster may have no series here ("" if none)

Dashboards: roles/grafana/files/dashboards/*.json. Rules: any YAML under
roles/prometheus/ whose name holds "rules" (`*.rules.yml`, `*rules*.yml.j2`, ...),
found by glob, so a new rules file is picked up without changing this module.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DASHBOARDS = Path("roles/grafana/files/dashboards")
RULE_GLOBS = ("roles/prometheus/**/*rules*.yml", "roles/prometheus/**/*rules*.yaml", "roles/prometheus/**/*rules*.j2")
DATASOURCE_UID = "gpuclus-prometheus"

# What each dashboard's queries are about when their metric names do not say.
DASHBOARD_KINDS = {"gpuclus-cluster": "node", "gpuclus-slurm": "slurm", "gpuclus-gpus": "gpu"}

# Series a healthy cluster may lack, with the reason (pattern over the expression).
MAY_BE_EMPTY = (
    (
        re.compile(r"\bslurm_user_(jobs|gpus)\b"),
        "only users with jobs have these series (none while the queue is empty)",
    ),
    (re.compile(r"\bslurm_node_reason_info\b"), "only nodes with a drain or down reason have this series"),
    (re.compile(r"\bnode_nfs_"), "only nodes whose kernel NFS client is in use have these series"),
    (re.compile(r'fstype=~"nfs'), "only nodes that mount NFS have these file systems"),
    (re.compile(r'hpc_job!=""'), "only GPUs a Slurm job holds carry hpc_job"),
    (re.compile(r"<\s*[0-9.]+\s*$"), "a threshold filter: empty while nothing is below it"),
)

# Values for Grafana's built-in interval variables: Prometheus scrapes every
# 15 s, so Grafana's $__rate_interval is at least 4 x 15 s.
RATE_INTERVAL = "1m"
INTERVAL = "15s"
RANGE = "1h"

_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
    "atan2",
    # aggregation operators, when a `by (...)` stands between them and their parenthesis
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
}


@dataclass(frozen=True)
class Query:
    """One PromQL expression and where it comes from."""

    expr: str
    source: str  # "dashboard" (a panel's target), "variable" (a template variable), "rule" (alert or record)
    file: str  # path relative to the repository
    title: str  # the panel's title, the variable's name, or the alert's / record's name
    ref: str = ""  # the target's refId; "alert" or "record" for rules
    instant: bool = False  # the panel asks for an instant value (tables, stats without a graph); rules always
    kind: str = "other"
    may_be_empty: str = ""
    metrics: frozenset[str] = field(default_factory=frozenset)

    @property
    def where(self) -> str:
        what = {"dashboard": "panel", "variable": "variable", "rule": self.ref or "rule"}[self.source]
        suffix = f" ({self.ref})" if self.source == "dashboard" and self.ref else ""
        return f"{self.file}: {what} {self.title!r}{suffix}"


# ---------------------------------------------------------------- finding


def dashboard_files(repo: Path = REPO) -> list[Path]:
    return sorted((repo / DASHBOARDS).glob("*.json"))


def rule_files(repo: Path = REPO) -> list[Path]:
    found = {path for pattern in RULE_GLOBS for path in repo.glob(pattern) if path.is_file()}
    return sorted(found)


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested panels included (rows themselves too)."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(path: Path, repo: Path = REPO) -> list[Query]:
    """The expressions of one dashboard: its template variables first, then each panel target's."""
    board = json.loads(path.read_text(encoding="utf-8"))
    name = _relative(path, repo)
    default_kind = DASHBOARD_KINDS.get(str(board.get("uid")), "other")
    found: list[Query] = []
    for variable in board.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        text = variable.get("query")
        text = text.get("query", "") if isinstance(text, dict) else str(text or "")
        expr = variable_expr(text)
        found.append(_query(expr, "variable", name, str(variable.get("name")), "", True, default_kind))
    for panel in panels(board):
        for target in panel.get("targets", []):
            expr = str(target.get("expr", "")).strip()
            if not expr:
                continue
            instant = bool(target.get("instant")) and not target.get("range", False)
            found.append(
                _query(
                    expr,
                    "dashboard",
                    name,
                    str(panel.get("title")),
                    str(target.get("refId", "")),
                    instant,
                    default_kind,
                )
            )
    return found


def rule_queries(path: Path, repo: Path = REPO, *, inventory: Mapping[str, Any] | None = None) -> list[Query]:
    """The expression of every alerting and recording rule of a Prometheus rules file.

    A role template (roles/<role>/templates/...j2) is rendered first, as
    ansible.builtin.template would on the monitoring node, from `inventory`
    (rendered group_vars; by default example_inventory(), a cluster that has
    every rule: controller, kernel NFS with clients, GPUs with dcgm-exporter).
    """
    if path.suffix == ".j2":
        text = render_role_template(path, inventory if inventory is not None else example_inventory())
    else:
        text = path.read_text(encoding="utf-8")
    document = yaml.safe_load(text)
    name = _relative(path, repo)
    found = []
    for group in (document or {}).get("groups", []) or []:
        for rule in group.get("rules", []) or []:
            ref = "alert" if "alert" in rule else "record"
            found.append(_query(str(rule["expr"]).strip(), "rule", name, str(rule.get(ref)), ref, True, "other"))
    return found


EXAMPLE_SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, nfs_server, monitoring, login]}
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 2}}
slurm: {partitions: [{name: gpu, nodes: "gpu[01-02]", default: true}]}
nfs: {exports: [{path: /srv/home, mount: /home}, {path: /srv/shared}]}
nvidia: {dcgm: true}
monitoring: {prometheus: true, alertmanager: true}
"""


def example_inventory(spec_text: str = EXAMPLE_SPEC) -> dict[str, Any]:
    """The group_vars gpuclus renders for a spec (by default EXAMPLE_SPEC), as Ansible loads them."""
    from gpuclus.render import render_files
    from gpuclus.spec.load import load_spec_text

    loaded = load_spec_text(spec_text)
    if loaded.spec is None or loaded.topology is None:
        raise ValueError(f"the example spec does not load: {loaded.findings}")
    files = render_files(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    return dict(_role_templates().group_vars(files))


def render_role_template(path: Path, inventory: Mapping[str, Any], host: str = "") -> str:
    """What ansible.builtin.template writes from roles/<role>/templates/<...>.j2 on `host` (default: the
    monitoring node), with the role's defaults and vars (tests/unit/role_templates.py)."""
    parts = path.resolve().parts
    at = len(parts) - 1 - parts[::-1].index("templates")
    role, template = parts[at - 1], "/".join(parts[at + 1 :])
    node = host or str(inventory.get("gpuclus_monitoring_server") or inventory["gpuclus_nodes"][0]["name"])
    return str(_role_templates().render(role, template, dict(inventory), node))


def _role_templates() -> Any:
    try:
        import role_templates
    except ImportError:  # outside tests/unit (integration tests): it lives there
        sys.path.insert(0, str(Path(__file__).resolve().parent / "unit"))
        import role_templates
    return role_templates


def all_queries(repo: Path = REPO, *, inventory: Mapping[str, Any] | None = None) -> list[Query]:
    """Every dashboard's variables and panel targets, then every rule (templates rendered from
    `inventory`, see rule_queries), in file order."""
    found: list[Query] = []
    for path in dashboard_files(repo):
        found.extend(dashboard_queries(path, repo))
    for path in rule_files(repo):
        found.extend(rule_queries(path, repo, inventory=inventory))
    return found


def _relative(path: Path, repo: Path) -> str:
    try:
        return str(path.resolve().relative_to(repo.resolve()))
    except ValueError:
        return str(path)


def _query(expr: str, source: str, file: str, title: str, ref: str, instant: bool, default_kind: str) -> Query:
    metrics = metric_names(expr)
    return Query(
        expr=expr,
        source=source,
        file=file,
        title=title,
        ref=ref,
        instant=instant,
        kind=classify(metrics, default_kind),
        may_be_empty=may_be_empty(expr),
        metrics=frozenset(metrics),
    )


# ---------------------------------------------------------------- classifying


def classify(metrics: Iterable[str], default: str = "other") -> str:
    """gpu, slurm or node by the metric names an expression reads (in that order), else `default`."""
    names = set(metrics)
    if any(name.startswith(("DCGM_", "gpuclus_gpu_")) for name in names):
        return "gpu"
    if any(name.startswith("slurm_") for name in names):
        return "slurm"
    if any(name.startswith("node_") or name == "up" for name in names):
        return "node"
    return default


def may_be_empty(expr: str) -> str:
    """Why a healthy cluster may return no series for this expression; "" when it always has data."""
    reasons = [reason for pattern, reason in MAY_BE_EMPTY if pattern.search(expr)]
    return "; ".join(reasons)


def variable_expr(text: str) -> str:
    """A template variable's query as a PromQL expression returning the series it reads.

    label_values(metric{...}, label) -> count by (label) (metric{...});
    label_values(label) -> count by (label) ({label!=""}); query_result(expr) -> expr;
    metrics(regex) -> count by (__name__) ({__name__=~"regex"}).
    """
    text = text.strip()
    match = re.fullmatch(r"label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)", text, re.S)
    if match:
        return f"count by ({match.group(2)}) ({match.group(1).strip()})"
    match = re.fullmatch(r"label_values\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)", text)
    if match:
        return f'count by ({match.group(1)}) ({{{match.group(1)}!=""}})'
    match = re.fullmatch(r"query_result\((.*)\)", text, re.S)
    if match:
        return match.group(1).strip()
    match = re.fullmatch(r"metrics\((.*)\)", text, re.S)
    if match:
        return f'count by (__name__) ({{__name__=~"{match.group(1).strip()}"}})'
    raise ValueError(f"unknown Grafana variable query: {text!r}")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (selectors' names and literal __name__ matchers)."""
    names = set(re.findall(r'__name__\s*=\s*"([A-Za-z_:][A-Za-z0-9_:]*)"', expr))
    text = re.sub(r'"(?:\\.|[^"\\])*"' + r"|'(?:\\.|[^'\\])*'|`[^`]*`", '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r" \1 ", text)
    for match in re.finditer(r"(?<![A-Za-z0-9_:.])([A-Za-z_:][A-Za-z0-9_:]*)(?![A-Za-z0-9_:]|\s*\()", text):
        word = match.group(1)
        if word.lower() not in _PROMQL_WORDS and not _is_duration_suffix(text, match.start()):
            names.add(word)
    return names


def _is_duration_suffix(text: str, start: int) -> bool:
    # "5m" in "offset 5m" or "@ 1700000000": a number right before the word.
    return start > 0 and text[start - 1].isdigit()


# ---------------------------------------------------------------- expanding

_VARIABLE = r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::[A-Za-z]+)?\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
_MATCHER_WITH_VARIABLE = re.compile(
    r'(?P<label>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op>=~|!~|!=|=)\s*"(?P<value>[^"]*\$[^"]*)"'
)
_NEVER = "__gpuclus_no_such_value__"


def expand(
    expr: str,
    variables: Mapping[str, str] | None = None,
    *,
    rate_interval: str = RATE_INTERVAL,
    interval: str = INTERVAL,
    range_: str = RANGE,
) -> str:
    """The expression as Grafana would send it with every template variable on "All".

    Built-ins: $__rate_interval, $__interval, $__range (and ${...} forms, _ms/_s
    variants). A label matcher holding a variable becomes what "All" sends with
    gpuclus' allValue `.*` (`instance=~"$instance"` and `instance="$instance"` ->
    `instance=~".*"`); a negative one excludes nothing (`!~"$x"` -> `!="<none>"`).
    `variables` gives a variable a value instead (inserted as it is). Raises
    ValueError when a `$` is left that this cannot place.
    """
    values = dict(variables or {})
    builtins = {
        "__rate_interval": rate_interval,
        "__interval": interval,
        "__range": range_,
        "__interval_ms": str(_milliseconds(interval)),
        "__range_ms": str(_milliseconds(range_)),
        "__range_s": str(_milliseconds(range_) // 1000),
    }

    def builtin(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("plain")
        if name in builtins:
            return builtins[name]
        if name in values:
            return values[name]
        return match.group(0)

    # Grafana's old [[name]] form first, as $name.
    text = re.sub(r"\[\[([A-Za-z_][A-Za-z0-9_]*)(?::[A-Za-z]+)?\]\]", r"$\1", expr)
    text = re.sub(_VARIABLE, builtin, text)

    def matcher(match: re.Match[str]) -> str:
        label, op = match.group("label"), match.group("op")
        if op in ("=", "=~"):
            return f'{label}=~".*"'
        return f'{label}!="{_NEVER}"'

    text = _MATCHER_WITH_VARIABLE.sub(matcher, text)
    if "$" in text:
        raise ValueError(f"a Grafana variable is left in {text!r}")
    return text


def _milliseconds(duration: str) -> int:
    units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000, "y": 31_536_000_000}
    total = 0
    for number, unit in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration):
        total += int(number) * units[unit]
    return total


# ---------------------------------------------------------------- the metric contract


def contract_metrics(doc: Path = REPO / "docs" / "monitoring.md") -> set[str]:
    """The metric names docs/monitoring.md names (in backticks: slurm_*, DCGM_*, gpuclus_*, node_*)."""
    names = set()
    # Fenced examples (```console ...) are not the contract, and their fences would pair the backticks wrongly.
    prose = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    for token in re.findall(r"`([^`]+)`", prose):
        for part in token.split(","):
            match = re.match(r"\s*((?:slurm_|DCGM_|gpuclus_|node_)[A-Za-z0-9_:]*)(\{.*)?\s*$", part)
            if match:
                names.add(match.group(1))
    return names
