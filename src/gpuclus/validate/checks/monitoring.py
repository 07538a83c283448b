"""Stage "monitoring": every Prometheus target is up, by Prometheus' word and by a scrape of our own."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from gpuclus.fileio import parse_json
from gpuclus.validate.check import Check
from gpuclus.validate.context import Context
from gpuclus.validate.results import Level, NodeResult, Outcome, Status, skipped, worst

if TYPE_CHECKING:
    from gpuclus.ssh.client import CommandResult

PROMETHEUS_PORT = 9090
# Prometheus keeps a target "up" until its next scrape fails (15 s by
# default); scraping each target ourselves as well reports a stopped exporter
# at once instead of one interval later.
_SCRAPE = "curl -fsS --max-time {seconds} -o /dev/null -w '%{{http_code}}' {url}"
# A target Prometheus calls up that gave no answer is scraped once more with
# more time before it fails: a busy node (the /metrics of Prometheus itself on
# a loaded 2-core sandbox host) can miss 5 s once; a stopped exporter refuses
# the connection both times, at once.
_FIRST_SECONDS, _AGAIN_SECONDS = 5, 10


def targets_up(ctx: Context) -> Outcome:
    if not ctx.spec.monitoring.prometheus:
        return skipped("Prometheus is off in the spec (monitoring.prometheus: false)")
    server = ctx.topology.monitoring_server
    if server is None:
        return skipped("no monitoring node in the spec")
    api = f"http://{server.address}:{PROMETHEUS_PORT}/api/v1/targets?state=active"
    answer = ctx.run(f"curl -fsS --max-time 10 {shlex.quote(api)}", timeout=30)
    try:
        targets = parse_json(answer.stdout)["data"]["activeTargets"]
    except (ValueError, KeyError, TypeError):
        return Outcome(
            status=Status.FAIL,
            message=f"Prometheus API at {api} did not answer: {answer.stderr.strip()[-200:] or 'no JSON'}",
            hint=f"on {server.name}: `systemctl status prometheus`; `gpuclus deploy --only monitoring`",
        )
    scrapes = {key: result.stdout.strip() for key, result in _scrape(ctx, targets, _FIRST_SECONDS).items()}
    unanswered = [target for target in targets if target.get("health") == "up" and scrapes[_key(target)] in ("", "000")]
    if unanswered:
        scrapes.update({key: result.stdout.strip() for key, result in _scrape(ctx, unanswered, _AGAIN_SECONDS).items()})
    selected = {node.name for node in ctx.selected}
    by_instance: dict[str, list[tuple[str, Status, str]]] = {}
    for target in sorted(targets, key=_key):
        instance = target.get("labels", {}).get("instance", "?")
        if instance in ctx.topology.by_name() and instance not in selected:
            continue
        by_instance.setdefault(instance, []).append(_judge(target, scrapes[_key(target)]))
    results = []
    for instance, judged in by_instance.items():
        status = worst([status for _job, status, _text in judged])
        message = "; ".join(f"{job}: {text}" for job, _status, text in judged)
        results.append(NodeResult(instance, status, message, "up" if status is Status.PASS else "down", "up"))
    results += [
        NodeResult(node.name, Status.FAIL, "Prometheus has no node-exporter target for it", "absent", "up")
        for node in ctx.selected
        if not any(job == "node" for job, _status, _text in by_instance.get(node.name, []))
    ]
    # An exporter on a node SSH could not reach (launch.munge found it) is down with its node.
    results, cut_off = ctx.name_unreachable(results)
    exporter_hint = (
        "on the named node: `systemctl status prometheus-node-exporter` (port 9100); "
        "`gpuclus deploy --only monitoring` starts it again"
    )
    others_failed = any(row.status is Status.FAIL and row.node not in cut_off for row in results)
    return Outcome(
        results,
        message=f"{len(targets)} target(s) on {server.name}",
        hint=exporter_hint if others_failed or not cut_off else ctx.unreachable_hint(cut_off),
    )


def _scrape(ctx: Context, targets: list[dict[str, Any]], seconds: int) -> dict[str, CommandResult]:
    """Each target's /metrics fetched now, in parallel: the HTTP code curl printed, by target key."""
    return ctx.remote.run_many(
        {
            _key(target): _SCRAPE.format(seconds=seconds, url=shlex.quote(target.get("scrapeUrl", "")))
            for target in targets
        },
        timeout=30,
    )


def _key(target: dict[str, Any]) -> str:
    labels = target.get("labels", {})
    return f"{labels.get('instance', '?')} ({labels.get('job', '?')})"


def _judge(target: dict[str, Any], scrape_code: str) -> tuple[str, Status, str]:
    job = target.get("labels", {}).get("job", "?")
    health = target.get("health", "unknown")
    url = target.get("scrapeUrl", "")
    if health != "up":
        error = f" ({target['lastError']})" if target.get("lastError") else ""
        return job, Status.FAIL, f"{url}: Prometheus says {health}{error}"
    if scrape_code != "200":
        return job, Status.FAIL, f"{url}: {_describe(scrape_code)}"
    return job, Status.PASS, "up"


def _describe(http_code: str) -> str:
    if http_code in ("", "000"):
        return "no answer when scraped now (exporter stopped, port closed or node down)"
    return f"scraping it now gives HTTP {http_code}"


# The controller's collector runs every 30 s (roles/slurm_metrics); three
# missed runs mean its timer or slurmctld is in trouble.
SLURM_METRICS_MAX_AGE_S = 90
NODE_EXPORTER_PORT = 9100
_SLURM_SERIES = ("slurm_up", "slurm_collector_last_success_timestamp_seconds", "slurm_collector_duration_seconds")


def slurm_metrics(ctx: Context) -> Outcome:
    """The controller's node exporter serves the Slurm collector's series, fresh, with slurmctld answering."""
    if not ctx.spec.monitoring.prometheus:
        return skipped("Prometheus is off in the spec (monitoring.prometheus: false)")
    controller = ctx.controller
    url = f"http://{controller.address}:{NODE_EXPORTER_PORT}/metrics"
    # The controller's clock judges the age, so a skewed control machine does not.
    answer = ctx.run(f"date +%s; curl -fsS --max-time 10 {shlex.quote(url)}", timeout=30)
    lines = answer.stdout.splitlines()
    values = _series_values(lines[1:], _SLURM_SERIES)
    hint = (
        f"on {controller.name}: `systemctl status gpuclus-slurm-metrics.timer gpuclus-slurm-metrics.service`, "
        "`journalctl -u gpuclus-slurm-metrics`; `gpuclus deploy --only monitoring` sets it up"
    )
    if answer.exit_status != 0 or not lines:
        return Outcome(
            [NodeResult(controller.name, Status.FAIL, f"{url} did not answer", "no answer", "slurm_up 1")],
            hint=f"on {controller.name}: `systemctl status prometheus-node-exporter` (port {NODE_EXPORTER_PORT})",
        )
    if "slurm_up" not in values:
        # The node exporter drops a textfile that does not parse and says so in this series: then the
        # collector wrote something it cannot read, and its log names the file and the line.
        unparsed = _series_values(lines[1:], ("node_textfile_scrape_error",)).get("node_textfile_scrape_error") == 1
        message = "the node exporter serves no slurm_* series" + (
            " (node_textfile_scrape_error 1: a file in its textfile directory does not parse)" if unparsed else ""
        )
        return Outcome(
            [NodeResult(controller.name, Status.FAIL, message, "absent", "slurm_up 1")],
            hint=(
                f"on {controller.name}: `journalctl -u prometheus-node-exporter` names the file and line; then {hint}"
                if unparsed
                else hint
            ),
        )
    now = float(lines[0]) if lines[0].strip().isdigit() else None
    last = values.get("slurm_collector_last_success_timestamp_seconds")
    age = None if now is None or last is None else max(0.0, now - last)
    took = values.get("slurm_collector_duration_seconds")
    if values["slurm_up"] != 1:
        return Outcome(
            [
                NodeResult(
                    controller.name, Status.FAIL, "the collector could not reach slurmctld", "slurm_up 0", "slurm_up 1"
                )
            ],
            hint=f"on {controller.name}: `systemctl status slurmctld`; then {hint}",
        )
    if age is None or age > SLURM_METRICS_MAX_AGE_S:
        shown = "never" if age is None else f"{age:.0f} s ago"
        return Outcome(
            [
                NodeResult(
                    controller.name,
                    Status.FAIL,
                    f"last successful collection {shown} (the timer runs every 30 s)",
                    round(age) if age is not None else "never",
                    f"<= {SLURM_METRICS_MAX_AGE_S}",
                    "s",
                )
            ],
            hint=hint,
        )
    message = f"slurm_up 1, collected {age:.0f} s ago" + (f" in {took:.2f} s" if took is not None else "")
    return Outcome(
        [NodeResult(controller.name, Status.PASS, message, round(age), f"<= {SLURM_METRICS_MAX_AGE_S}", "s")],
        message=f"{sum(1 for line in lines if line.startswith('slurm_'))} slurm_* samples on {controller.name}",
    )


def _series_values(lines: list[str], names: tuple[str, ...]) -> dict[str, float]:
    """The value of each unlabelled series in ``names`` from a /metrics page."""
    found: dict[str, float] = {}
    for line in lines:
        name, _, rest = line.partition(" ")
        if name in names:
            try:
                found[name] = float(rest.split()[0])
            except (IndexError, ValueError):
                continue
    return found


CHECKS = [
    Check("monitoring.targets", Level.QUICK, "every Prometheus target is up", targets_up, needs_slurm=False),
    Check(
        "monitoring.slurm_metrics",
        Level.QUICK,
        "the controller's Slurm metrics are fresh and slurmctld answers them",
        slurm_metrics,
        needs_slurm=False,
    ),
]
