"""The pytorch phase for real: Lmod, the environment from the wheelhouse, the job templates through Slurm.

The shared sandbox cluster (conftest.deployed) is brought up with the
wheelhouse scripts/wheelhouse.sh fills (the CPU torch 2.13.0 for Python 3.11
and its dependencies), so its spec turns on Lmod and a node-local
environment on every compute and login node. The jobs are real Slurm jobs
training for real with gloo on the CPU: the sandbox's GPUs are device nodes
without a driver, so PyTorch sees none, which is how the templates run on any
CPU node.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from cluster_helpers import ARTIFACTS_DIR, GPU1, GPU2, HEAD, WHEELHOUSE, Cluster, gpuclus

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

ENV_DIR = "/opt/gpuclus/software/pytorch-2.13.0-cpu"
EXAMPLES = "/opt/gpuclus/examples"
JOB_ENV = "/etc/gpuclus/pytorch-env.sh"
RESULT = re.compile(r"^GPUCLUS_RESULT (\{.*\})$", re.MULTILINE)


@pytest.fixture
def cluster(deployed: Cluster) -> Cluster:
    if WHEELHOUSE is None:
        # CI fills the wheelhouse (scripts/test.sh); a run without one must not pass quietly there.
        assert os.environ.get("CI") != "true", "no wheelhouse under CI: scripts/wheelhouse.sh did not run"
        pytest.skip("no wheelhouse (run scripts/wheelhouse.sh): the sandbox deploys no pytorch phase without one")
    return deployed


def result_of(output: str) -> dict[str, object]:
    found = RESULT.findall(output)
    assert found, f"no GPUCLUS_RESULT line in:\n{output[-3000:]}"
    parsed: dict[str, object] = json.loads(found[-1])
    return parsed


def test_every_compute_and_login_node_imports_torch_from_the_wheelhouse_build(cluster: Cluster) -> None:
    for node in (HEAD, GPU1, GPU2):
        answer = cluster.on(node, f"{ENV_DIR}/bin/python -c 'import torch, numpy; print(torch.__version__)'")
        assert answer.stdout.strip() == "2.13.0+cpu", (node, answer.stdout)
        stamp = json.loads(cluster.on(node, f"cat {ENV_DIR}/gpuclus-env.json").stdout)
        assert stamp["source"] == "wheelhouse"
        assert stamp["requirements"][0] == "torch==2.13.0"
        assert any(name.startswith("torch-2.13.0+cpu-") for name in stamp["wheels"])


def test_the_redeploy_installed_nothing_in_the_pytorch_phase(cluster: Cluster) -> None:
    phases = {phase["name"]: phase for phase in cluster.second["phases"]}
    assert "pytorch" in phases
    assert phases["pytorch"]["changed"] == 0, phases["pytorch"]


def test_module_load_pytorch_works_in_a_batch_script_submitted_from_a_login_shell(cluster: Cluster) -> None:
    script = "#!/bin/bash\nmodule load pytorch\npython -c 'import torch; print(\"MODULE\", torch.__version__)'\n"
    cluster.on(HEAD, f"cat > /var/tmp/gpuclus-it-module.sh <<'EOF'\n{script}EOF")
    submit = cluster.on(
        HEAD,
        "bash -lc 'module avail 2>&1; sbatch --parsable --wait --nodelist=" + GPU1 + " "
        "--output=/var/tmp/gpuclus-it-module-%j.out /var/tmp/gpuclus-it-module.sh'",
        timeout=180,
    )
    assert "pytorch/2.13.0-cpu" in submit.stdout
    job = submit.stdout.strip().splitlines()[-1]
    output = cluster.on(GPU1, f"cat /var/tmp/gpuclus-it-module-{job}.out").stdout
    assert "MODULE 2.13.0+cpu" in output, output


def test_srun_on_two_nodes_trains_the_ddp_template_with_gloo_and_the_loss_falls(cluster: Cluster) -> None:
    command = (
        f"srun --nodes=2 --ntasks-per-node=1 --time=5 bash -c '. {JOB_ENV} && "
        'python "$GPUCLUS_EXAMPLES_DIR/common/gpuclus_launch.py" '
        '"$GPUCLUS_EXAMPLES_DIR/common/train_ddp.py" --steps 30\''
    )
    answer = cluster.on(HEAD, command, timeout=300)
    result = result_of(answer.stdout)
    assert result["world_size"] == 2
    assert result["nodes"] == 2
    assert result["backend"] == "gloo" and result["device"] == "cpu"
    assert result["decreased"] is True, result["losses"]
    assert result["replicas_agree"] is True
    assert float(result["samples_per_s"]) > 0  # type: ignore[arg-type]


def test_sbatch_of_the_multi_node_template_writes_its_output_in_the_submit_directory(cluster: Cluster) -> None:
    # docs/pytorch.md says: output in the directory sbatch ran from, as <template>-<jobid>.out. The sandbox has
    # no shared mount, so the directory must exist on the batch host too, and the file lands there.
    workdir = "/var/tmp/gpuclus-it-sbatch"
    for node in (HEAD, GPU1, GPU2):
        cluster.on(node, f"mkdir -p {workdir}")
    submit = cluster.on(
        HEAD, f"cd {workdir} && sbatch --parsable --wait {EXAMPLES}/ddp-multi-node/job.sbatch", timeout=300
    )
    job = submit.stdout.strip().splitlines()[-1]
    batch_host = cluster.on(HEAD, f"sacct -X -n -P -j {job} -o NodeList").stdout.strip().split(",")[0]
    batch_host = GPU1 if "[" in batch_host or not batch_host else batch_host
    output = cluster.on(batch_host, f"cat {workdir}/ddp-multi-node-{job}.out").stdout
    result = result_of(output)
    assert result["template"] == "ddp-multi-node"
    assert result["world_size"] == 2 and result["decreased"] is True and result["replicas_agree"] is True


def test_validate_full_only_workloads_passes_and_reports_the_scaling_figures(cluster: Cluster) -> None:
    result = gpuclus("validate", str(cluster.spec), "--level", "full", "--only", "workloads", "--json", timeout=900)
    report = json.loads(result.stdout)
    assert result.returncode == 0, report["failures"]
    checks = {check["id"]: check for check in report["checks"]}
    for passing in ("workloads.env", "workloads.ddp", "workloads.sbatch", "workloads.fsdp"):
        assert checks[passing]["status"] == "pass", checks[passing]
    assert "gloo on CPU" in checks["workloads.ddp"]["message"], checks["workloads.ddp"]
    # MPI comes later (test_cluster_validate installs Open MPI, then expects workloads.mpi to pass).
    assert checks["workloads.mpi"]["status"] == "skip" and "mpicc" in checks["workloads.mpi"]["message"]
    # Both sandbox nodes share this host's two cores: two nodes cannot beat one, which is a WARN with
    # that cause, never a FAIL. The figures are in the report.
    scaling = checks["workloads.scaling"]
    assert scaling["status"] in {"pass", "warn"}, scaling
    assert scaling["unit"] == "%" and 0 < float(scaling["value"]) <= 150, scaling
    assert re.search(r"1 node \d+ samples/s; 2 nodes \d+ samples/s \(\d+(\.\d+)?% efficiency\)", scaling["message"])
    if scaling["status"] == "warn":
        assert "share" in scaling["hint"], scaling
    # Every job validate started carries its run's name and is gone.
    left = cluster.on(HEAD, "squeue --noheader --format=%j").stdout
    assert "gpuclus-validate" not in left, left


CONTAINER_RUN = (
    "cd {workdir} && GPUCLUS_CONTAINER_IMAGE=/var/lib/gpuclus-sandbox/images/test.sqsh "
    "GPUCLUS_CONTAINER_MOUNTS={mounts} GPUCLUS_CONTAINER_PYTHON=" + ENV_DIR + "/bin/python "
    "sbatch --parsable --wait --nodes=2 --time=5 " + EXAMPLES + "/ddp-container/job.sbatch --steps 20"
)


@pytest.mark.skipif(ARTIFACTS_DIR is None, reason="no artifacts directory: the sandbox has no containers phase")
def test_the_container_template_trains_across_two_nodes_inside_the_pyxis_image(cluster: Cluster) -> None:
    # No NGC image here (no registry): the sandbox's test image (busybox, os-release ID=gpuclus-test) with the
    # node's /usr and the environment mounted read-only stands in for it, so the template's own path runs:
    # srun --container-image/--container-mounts on both nodes, the launcher and torchrun inside the container.
    workdir = "/var/tmp/gpuclus-it-container"
    for node in (HEAD, GPU1, GPU2):
        cluster.on(node, f"mkdir -p {workdir}")
    mounts = f"/usr:/usr:ro,{ENV_DIR}:{ENV_DIR}:ro,/etc/ld.so.cache:/etc/ld.so.cache:ro"
    submit = cluster.on(HEAD, CONTAINER_RUN.format(workdir=workdir, mounts=mounts), timeout=300)
    job = submit.stdout.strip().splitlines()[-1]
    result = result_of(cluster.on(GPU1, f"cat {workdir}/ddp-container-{job}.out").stdout)
    assert result["template"] == "ddp-container"
    assert result["world_size"] == 2 and result["nodes"] == 2
    assert result["decreased"] is True and result["replicas_agree"] is True
    # The control: without the node's /usr mounted the image has no such Python, so the job above did run
    # in the image, not on the node.
    control = cluster.on(
        HEAD, CONTAINER_RUN.format(workdir=workdir, mounts=f"{ENV_DIR}:{ENV_DIR}:ro"), check=False, timeout=300
    )
    assert control.exit_status != 0, control.stdout
