"""Stage "containers": a Pyxis job (srun --container-image) runs on every compute node."""

from __future__ import annotations

from gpuclus.validate.check import Check
from gpuclus.validate.checks import container_probe
from gpuclus.validate.context import Context
from gpuclus.validate.results import Level, NodeResult, Outcome, Status, skipped

# Enroot pulls the image on first use: minutes on a slow link, seconds after.
PULL_TIME_LIMIT_S = 600


def pyxis_job(ctx: Context) -> Outcome:
    if not ctx.spec.containers.pyxis:
        return skipped("Pyxis is off in the spec (containers.pyxis: false)")
    if not ctx.compute:
        return skipped("no compute nodes selected")
    plugin = ctx.run("srun --help 2>&1 | grep -c -- --container-image", timeout=30)
    if plugin.stdout.strip() in ("", "0"):
        return Outcome(
            status=Status.FAIL,
            message="srun has no --container-image option: the Pyxis SPANK plugin is not loaded",
            hint="/etc/slurm/plugstack.conf.d/pyxis.conf must load spank_pyxis.so; "
            "`gpuclus deploy --only containers` installs it",
        )
    image = ctx.options.container_image
    answers = ctx.srun_each(
        container_probe.PROBE,
        ctx.compute,
        time_limit_s=PULL_TIME_LIMIT_S,
        options=lambda _node: {"extra": (f"--container-image={image}",), "shell": container_probe.SHELL},
    )
    results = []
    for node in ctx.compute:
        verdict = container_probe.read(answers[node.name])
        if verdict.stage == container_probe.INSIDE:
            results.append(NodeResult(node.name, Status.PASS, f"{image}: {verdict.detail}"))
            continue
        # Unknown: the job ran and nothing failed, it only could not be told apart from the host.
        status = Status.WARN if verdict.stage == container_probe.UNKNOWN else Status.FAIL
        own = container_probe.hint(verdict.stage, image)
        results.append(NodeResult(node.name, status, f"{image}: {verdict.detail}", hint=own))
    # Each node's row carries the hint for what it failed; the check's (JUnit, JSON) joins them.
    hints = dict.fromkeys(result.hint for result in results if result.hint)
    return Outcome(results, message=f"image {image}", hint="; ".join(hints) or None)


CHECKS = [
    Check("containers.pyxis", Level.STANDARD, "a Pyxis container job runs on every compute node", pyxis_job),
]
