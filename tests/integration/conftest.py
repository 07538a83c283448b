"""The deployed 3-node sandbox cluster, shared by the end-to-end and validate tests.

Deploying takes minutes, so it happens once per session: sandbox up → deploy →
deploy again (the second must change nothing). The cluster is removed at the
end of the session, also when a test fails.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest
from cluster_helpers import CLUSTER, SANDBOX_UP, Cluster, gpuclus


@pytest.fixture(scope="session")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.skip("the sandbox needs root for privileged containers")
    spec = tmp_path_factory.mktemp(CLUSTER) / "sandbox.yaml"
    up = gpuclus(*SANDBOX_UP, "--spec", str(spec))
    try:
        assert up.returncode == 0, up.stderr
        started = time.monotonic()
        first = gpuclus("deploy", str(spec), "--json")
        first_seconds = time.monotonic() - started
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
        started = time.monotonic()
        second = gpuclus("deploy", str(spec), "--json")
        second_seconds = time.monotonic() - started
        assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
        status = json.loads(gpuclus("sandbox", "status", "--spec", str(spec), "--json").stdout)
        print(f"\nfresh deploy {first_seconds:.0f} s, no-change deploy {second_seconds:.0f} s")
        yield Cluster(
            spec=spec,
            engine=status["engine"],
            addresses={node["name"]: node["address"] for node in status["nodes"]},
            first=json.loads(first.stdout),
            second=json.loads(second.stdout),
        )
    finally:
        gpuclus("sandbox", "down", "--spec", str(spec))
