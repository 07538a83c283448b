"""The NVIDIA GPU catalogue: PCI device id -> model, generation, kernel-module flavour."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from gpuclus import gpu_catalog
from gpuclus.gpu_catalog import (
    CatalogError,
    GpuKind,
    cuda_key,
    kind_for_model,
    lookup,
    model_matches,
    normalise_id,
    parse_catalog,
)
from gpuclus.render.context import gpu_generation, min_driver_branch
from gpuclus.spec.models import Gpus


@pytest.mark.parametrize(
    ("device_id", "model", "generation"),
    [
        ("0x1db1", "v100", "volta"),
        ("0x1eb8", "t4", "turing"),
        ("0x20b0", "a100", "ampere"),
        ("0x20b2", "a100", "ampere"),
        ("0x2236", "a10", "ampere"),
        ("0x2684", "rtx4090", "ada"),
        ("0x26b9", "l40s", "ada"),
        ("0x2330", "h100", "hopper"),
        ("0x2331", "h100", "hopper"),
        ("0x2335", "h200", "hopper"),
        ("0x2342", "gh200", "hopper"),
        ("0x2901", "b200", "blackwell"),
    ],
)
def test_known_ids_name_their_model_and_generation(device_id: str, model: str, generation: str) -> None:
    kind = lookup(device_id)
    assert (kind.model, kind.generation, kind.known) == (model, generation, True)


@pytest.mark.parametrize(
    ("device_id", "flavour", "required"),
    [
        ("15f8", "proprietary", False),  # pascal
        ("1db5", "proprietary", False),  # volta
        ("1eb8", "open", False),  # turing: recommended
        ("2236", "open", False),  # ampere
        ("2684", "open", False),  # ada
        ("2330", "open", False),  # hopper
        ("2342", "open", True),  # Grace Hopper: the proprietary modules do not support Grace
        ("2901", "open", True),  # blackwell
        ("2941", "open", True),  # Grace Blackwell
    ],
)
def test_each_generation_gets_the_flavour_nvidia_recommends(device_id: str, flavour: str, required: bool) -> None:
    kind = lookup(device_id)
    assert (kind.module_flavour, kind.open_required) == (flavour, required)


def test_an_unknown_id_is_unknown_never_guessed() -> None:
    # 0x2332 sits between two H100 ids: still not an H100 until the table says so.
    assert lookup("0x2332") == GpuKind("2332", None, "unknown", "unknown")
    assert not lookup("beef").known
    assert lookup("0x1234").describe() == "unknown device 0x1234"
    assert lookup("0x2330").describe() == "h100 (0x2330, hopper)"


@pytest.mark.parametrize("text", ["0x2330", "2330", "0X2330", "10de:2330", " 0x2330\n"])
def test_ids_are_read_in_every_spelling_sysfs_and_lspci_use(text: str) -> None:
    assert normalise_id(text) == "2330"


@pytest.mark.parametrize(
    ("spec_model", "catalog_model", "matches"),
    [
        ("h100", "h100", True),
        ("H100", "h100", True),
        ("h100-sxm", "h100", True),
        ("a100-80gb", "a100", True),
        ("a100_40gb", "a100", True),
        ("4090", "rtx4090", True),
        ("rtx4090", "rtx4090", True),
        ("rtx-4090", "rtx4090", True),
        ("a10", "a100", False),
        ("a100", "a10", False),
        ("h100", "h200", False),
        ("h200", "gh200", False),
        ("l40", "l40s", False),
        ("v100", "v100s", False),
    ],
)
def test_a_spec_model_matches_only_its_own_model(spec_model: str, catalog_model: str, matches: bool) -> None:
    assert model_matches(spec_model, catalog_model) is matches


def test_every_entry_of_the_shipped_catalogue_is_well_formed() -> None:
    kinds = gpu_catalog._catalog()
    assert len(kinds) > 40
    assert {kind.generation for kind in kinds.values()} == set(gpu_catalog.GENERATIONS)
    for kind in kinds.values():
        # A model becomes a Slurm GRES type and must pass the spec's gpus.model grammar.
        assert kind.model is not None and kind.model == kind.model.lower() and " " not in kind.model
        assert kind.name


VOLTA = {
    "volta": {"module_flavour": "proprietary", "open_required": False, "min_driver_branch": 384, "min_cuda": "9.0"}
}
V100 = {"model": "v100", "generation": "volta"}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ([], "generations"),
        ({"generations": {"kepler": {}}, "devices": {}}, "kepler"),
        ({"generations": {"volta": {"module_flavour": "closed", "open_required": False}}, "devices": {}}, "volta"),
        ({"generations": VOLTA, "devices": {9008: {}}}, "9008"),
        ({"generations": VOLTA, "devices": {"1db1": {"model": "v100", "generation": "hopper"}}}, "1db1"),
        # The minimums: required per generation, optional per device, always a branch and a quoted version.
        ({"generations": {"volta": {**VOLTA["volta"], "min_driver_branch": None}}, "devices": {}}, "min_driver_branch"),
        ({"generations": {"volta": {**VOLTA["volta"], "min_cuda": 9.0}}, "devices": {}}, "min_cuda"),
        ({"generations": VOLTA, "devices": {"1db1": {**V100, "min_driver_branch": "535"}}}, "device 1db1"),
        ({"generations": VOLTA, "devices": {"1db1": {**V100, "min_cuda": "12"}}}, "device 1db1"),
    ],
)
def test_a_malformed_catalogue_is_refused(data: Any, words: str) -> None:
    with pytest.raises(CatalogError, match=words):
        parse_catalog(data)


def test_the_cli_does_not_read_the_catalogue_at_import() -> None:
    code = "import sys, gpuclus.cli.main, gpuclus.preflight.runner; print('gpuclus.gpu_catalog' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("model", "generation"),
    [("h100", "hopper"), ("A100-80GB", "ampere"), ("v100", "volta"), ("b200", "blackwell"), ("4090", "ada")],
)
def test_a_spec_model_names_its_generation(model: str, generation: str) -> None:
    kind = kind_for_model(model)
    assert kind is not None and kind.generation == generation


def test_an_unknown_spec_model_names_nothing() -> None:
    assert kind_for_model("a10x") is None
    assert kind_for_model("gpu") is None


@pytest.mark.parametrize(
    ("gpus", "generation"),
    [
        ({"count": 1, "model": "gh200"}, "grace"),  # open modules only: the role's "grace"
        ({"count": 8, "model": "h100"}, "hopper"),
        ({"count": 2}, "unknown"),  # no model: the role picks the modules every generation before Blackwell takes
        ({"count": 2, "model": "mystery9"}, "unknown"),
    ],
)
def test_render_hands_the_role_a_generation(gpus: dict[str, object], generation: str) -> None:
    node = SimpleNamespace(gpus=Gpus.model_validate(gpus))
    assert gpu_generation(node) == generation


@pytest.mark.parametrize(
    ("model", "branch", "cuda"),
    [
        ("b200", 570, "12.8"),  # Blackwell: newer than the spec's defaults (550, 12.4)
        ("rtx5090", 570, "12.8"),
        ("h100", 525, "11.8"),
        ("gh200", 535, "11.8"),  # Grace Hopper: the device's own floor over Hopper's
        ("a100", 450, "11.0"),
        ("v100", 384, "9.0"),
    ],
)
def test_a_model_names_the_oldest_driver_and_cuda_it_runs_with(model: str, branch: int, cuda: str) -> None:
    kind = kind_for_model(model)
    assert kind is not None
    assert (kind.min_driver_branch, kind.min_cuda) == (branch, cuda)


def test_unknown_gpus_have_no_floor() -> None:
    assert (lookup("1234").min_driver_branch, lookup("1234").min_cuda) == (0, "0.0")


def test_cuda_versions_compare_as_numbers() -> None:
    assert cuda_key("12.10") > cuda_key("12.8") > cuda_key("11.8")


@pytest.mark.parametrize(
    ("gpus", "branch"),
    [({"count": 8, "model": "b200"}, 570), ({"count": 1, "model": "gh200"}, 535), ({"count": 2}, 0)],
)
def test_render_hands_the_role_the_catalogues_minimum_branch(gpus: dict[str, object], branch: int) -> None:
    node = SimpleNamespace(gpus=Gpus.model_validate(gpus))
    assert min_driver_branch(node) == branch
