"""JUnit XML for CI systems: one testsuite per stage, one testcase per check.

A failing check becomes a <failure> whose text lists the failing nodes and the
hint; SKIP becomes <skipped>; WARN passes with the warning in <system-out>.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from gpuclus.fileio import write_text_atomic
from gpuclus.validate.registry import STAGES
from gpuclus.validate.results import CheckResult, Status
from gpuclus.validate.runner import Report


def junit_xml(report: Report) -> str:
    root = ET.Element("testsuites", name=f"gpuclus validate {report.cluster}")
    _totals(root, report.results)
    for stage in STAGES:
        results = [result for result in report.results if result.stage == stage]
        if not results:
            continue
        suite = ET.SubElement(root, "testsuite", name=stage, timestamp=report.started)
        _totals(suite, results)
        for result in results:
            suite.append(_testcase(result))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(report: Report, path: Path) -> None:
    write_text_atomic(path, junit_xml(report))


def _totals(element: ET.Element, results: list[CheckResult]) -> None:
    element.set("tests", str(len(results)))
    element.set("failures", str(sum(result.status is Status.FAIL for result in results)))
    element.set("errors", "0")
    element.set("skipped", str(sum(result.status is Status.SKIP for result in results)))
    element.set("time", f"{sum(result.duration_s for result in results):.3f}")


def _testcase(result: CheckResult) -> ET.Element:
    case = ET.Element("testcase", classname=f"gpuclus.validate.{result.stage}", name=result.id)
    case.set("time", f"{result.duration_s:.3f}")
    outcome = result.outcome
    lines = [f"{node.node}: {node.status.value} {node.message}".rstrip() for node in outcome.nodes]
    if result.status is Status.FAIL:
        failing = [f"{node.node}: {node.message}" for node in outcome.nodes if node.status is Status.FAIL]
        failure = ET.SubElement(case, "failure", message="; ".join(failing) or outcome.message, type="check-failed")
        failure.text = "\n".join(
            [*(failing or [outcome.message]), *([f"hint: {outcome.hint}"] if outcome.hint else [])]
        )
    elif result.status is Status.SKIP:
        ET.SubElement(case, "skipped", message=outcome.message or "skipped")
    if lines or outcome.message:
        ET.SubElement(case, "system-out").text = "\n".join([outcome.message, *lines]).strip()
    return case
