"""Stage "containers": a Pyxis job (srun --container-image) runs on every compute node."""

from __future__ import annotations

from gpuclus.slurm import commands as slurm
from gpuclus.validate.check import Check
from gpuclus.validate.context import Context
from gpuclus.validate.model import Level, NodeResult, Outcome, Status, skipped

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
        "grep -m1 '^ID=' /etc/os-release",
        ctx.compute,
        time_limit_s=PULL_TIME_LIMIT_S,
        options=lambda _node: {"extra": (f"--container-image={image}",)},
    )
    results = []
    for node in ctx.compute:
        answer = answers[node.name]
        if answer.exit_status == 0 and answer.stdout.strip().startswith("ID="):
            results.append(NodeResult(node.name, Status.PASS, f"{image}: {answer.stdout.strip()}"))
        else:
            detail = slurm.first_error_line(answer.stderr, f"exit {answer.exit_status}")
            results.append(NodeResult(node.name, Status.FAIL, f"{image}: {detail}"))
    return Outcome(
        results,
        message=f"image {image}",
        hint="`enroot import docker://IMAGE` on the node shows pull and credential errors; offline clusters "
        "can pass `--container-image` a local squashfs file",
    )


CHECKS = [
    Check("containers.pyxis", Level.STANDARD, "a Pyxis container job runs on every compute node", pyxis_job),
]
