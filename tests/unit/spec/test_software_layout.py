"""Where the deep-learning layer lives (spec/software.py), and the sandbox's --wheelhouse."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclus.errors import UsageError
from gpuclus.sandbox.layout import sandbox_layout, sandbox_spec_text
from gpuclus.sandbox.lifecycle import wheelhouse_directory
from gpuclus.spec.load import load_spec_text
from gpuclus.spec.models import ClusterSpec
from gpuclus.spec.software import index_url, nccl_environment, requirements, resolved_flavour, software_layout

HEAD = "  - {name: head, address: 10.0.0.10, roles: [controller, login, nfs_server]}\n"


def spec(extra: str = "", *, gpus: str = "{count: 2}") -> ClusterSpec:
    text = (
        "apiVersion: gpuclus/v1\n"
        "cluster: {name: lab, admin_user: ubuntu}\n"
        "nodes:\n" + HEAD + f'  - {{name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {gpus}}}\n'
        "nfs:\n  exports: [{path: /srv/nfs/shared, mount: /shared}]\n" + extra
    )
    loaded = load_spec_text(text)
    assert loaded.spec is not None, loaded.findings
    return loaded.spec


def test_a_shared_layout_lives_in_the_first_exports_mount_and_maps_to_the_servers_paths() -> None:
    layout = software_layout(spec("pytorch: {install: true}\n"))
    assert layout.shared
    assert layout.env_dir == "/shared/software/pytorch-2.13.0-cu124"
    assert layout.python == "/shared/software/pytorch-2.13.0-cu124/bin/python"
    assert (layout.modules_dir, layout.examples_dir) == ("/shared/modules", "/shared/examples")
    assert layout.module == "pytorch/2.13.0-cu124"
    assert layout.on_server(layout.examples_dir) == "/srv/nfs/shared/examples"
    assert layout.on_server(layout.env_dir) == "/srv/nfs/shared/software/pytorch-2.13.0-cu124"


def test_a_node_local_layout_lives_under_opt_gpuclus_and_writes_where_it_reads() -> None:
    layout = software_layout(spec("pytorch: {install: true, location: node-local, flavour: cpu}\n"))
    assert not layout.shared
    assert layout.env_dir == "/opt/gpuclus/software/pytorch-2.13.0-cpu"
    assert (layout.modules_dir, layout.examples_dir) == ("/opt/gpuclus/modules", "/opt/gpuclus/examples")
    assert layout.on_server(layout.examples_dir) == layout.examples_dir


def test_chosen_paths_win_over_the_defaults() -> None:
    layout = software_layout(
        spec(
            "modules: {lmod: true, path: /shared/lmod}\n"
            "pytorch: {install: true, prefix: /shared/envs, examples_dir: /shared/ex, version: '2.5.1'}\n"
        )
    )
    assert (layout.env_dir, layout.modules_dir, layout.examples_dir) == (
        "/shared/envs/pytorch-2.5.1-cu124",
        "/shared/lmod",
        "/shared/ex",
    )


@pytest.mark.parametrize(
    ("extra", "gpus", "flavour"),
    [
        ("", "{count: 2}", "cu124"),
        ("nvidia: {cuda: {version: '12.8'}}\n", "{count: 2}", "cu128"),
        ("", "{count: 2, fake: true}", "cpu"),  # fake GPUs (the sandbox) run no CUDA
        ("pytorch: {flavour: cu118}\n", "{count: 2}", "cu118"),
        ("pytorch: {flavour: cpu}\n", "{count: 2}", "cpu"),
    ],
)
def test_auto_flavour_follows_the_cuda_version_where_gpus_are_real(extra: str, gpus: str, flavour: str) -> None:
    assert resolved_flavour(spec(extra, gpus=gpus)) == flavour


def test_requirements_put_torch_first_then_numpy_then_the_extras() -> None:
    chosen = spec("pytorch: {numpy_version: '2.1.3', extra_packages: [tqdm, 'einops>=0.8']}\n")
    assert requirements(chosen) == ["torch==2.13.0", "numpy==2.1.3", "tqdm", "einops>=0.8"]
    assert requirements(spec()) == ["torch==2.13.0", "numpy"]


def test_the_index_is_pytorchs_own_for_the_flavour_unless_a_wheelhouse_or_an_index_is_named() -> None:
    assert index_url(spec()) == "https://download.pytorch.org/whl/cu124"
    assert index_url(spec("pytorch: {index_url: 'https://mirror.lab/simple'}\n")) == "https://mirror.lab/simple"
    assert index_url(spec("pytorch: {wheelhouse: wheels}\n")) is None


def test_nccl_settings_follow_the_fabric_and_the_spec_wins() -> None:
    assert nccl_environment(spec()) == {"NCCL_IB_DISABLE": "1"}
    chosen = spec("network: {fabric: infiniband}\npytorch: {nccl_env: {NCCL_IB_HCA: mlx5_0}}\n")
    assert nccl_environment(chosen) == {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5_0"}
    assert nccl_environment(spec("pytorch: {nccl_env: {NCCL_IB_DISABLE: '0'}}\n")) == {"NCCL_IB_DISABLE": "0"}


@pytest.mark.parametrize(
    "bad",
    [
        "pytorch: {extra_packages: ['--index-url=http://evil']}\n",
        "pytorch: {extra_packages: ['pkg @ https://x/pkg.whl']}\n",
        "pytorch: {nccl_env: {LD_PRELOAD: /tmp/x.so}}\n",
        "pytorch: {nccl_env: {NCCL_DEBUG: 'INFO; rm -rf /'}}\n",
        "pytorch: {flavour: cuda12}\n",
        "pytorch: {index_url: 'ftp://mirror/simple'}\n",
        "pytorch: {version: 2.5}\n",
    ],
)
def test_values_that_would_change_a_command_line_or_a_shell_file_are_refused(bad: str) -> None:
    loaded = load_spec_text(
        "apiVersion: gpuclus/v1\ncluster: {name: lab, admin_user: ubuntu}\n"
        "nodes:\n  - {name: head, address: 10.0.0.10, roles: [controller, compute]}\n" + bad
    )
    assert not loaded.ok
    assert any(finding.path and finding.path.startswith("pytorch.") for finding in loaded.findings)


def test_the_sandbox_spec_with_a_wheelhouse_turns_on_lmod_and_a_node_local_environment(tmp_path: Path) -> None:
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    layout = sandbox_layout("sb", 3, 2, "10.213.0.0/24")
    text = sandbox_spec_text(layout, None, str(tmp_path))
    loaded = load_spec_text(text)
    assert loaded.ok and loaded.spec is not None, loaded.findings
    assert loaded.spec.modules.lmod
    pytorch = loaded.spec.pytorch
    assert (pytorch.install, pytorch.location, pytorch.wheelhouse, pytorch.flavour) == (
        True,
        "node-local",
        str(tmp_path),
        "cpu",
    )
    assert not load_spec_text(sandbox_spec_text(layout)).spec.pytorch.install  # type: ignore[union-attr]


def test_wheelhouse_option_wants_a_directory_with_the_torch_wheel(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such directory"):
        wheelhouse_directory(tmp_path / "nowhere")
    with pytest.raises(UsageError, match=r"holds no torch 2\.13\.0 wheel"):
        wheelhouse_directory(tmp_path)
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert wheelhouse_directory(tmp_path) == str(tmp_path.resolve())
