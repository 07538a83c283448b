"""Which NVIDIA GPU a PCI device id is: model, architecture, the kernel modules it wants, the oldest driver and CUDA.

The table is data (gpuclus/data/nvidia_gpus.yml) so the nvidia role can get the
same one through render. It is read on the first lookup, not at import, so
`gpuclus --help` never pays for it. An id the table does not list is
"unknown": gpuclus never guesses a generation from an id's neighbours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

CATALOG_FILE = Path(__file__).resolve().parent / "data" / "nvidia_gpus.yml"
UNKNOWN = "unknown"
GENERATIONS = ("pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")
FLAVOURS = ("open", "proprietary")

# Words people put in front of a model ("NVIDIA RTX 4090", "tesla-v100") that
# say nothing about which chip it is.
_NOISE = {"nvidia", "geforce", "tesla", "quadro", "rtx"}


@dataclass(frozen=True)
class GpuKind:
    device_id: str  # four lower-case hex digits, as in the catalogue
    model: str | None  # None: not in the catalogue
    generation: str  # one of GENERATIONS, or "unknown"
    module_flavour: str  # "open", "proprietary", or "unknown"
    open_required: bool = False  # the proprietary modules do not support it (Blackwell, Grace)
    name: str = ""
    min_driver_branch: int = 0  # the oldest driver branch that knows it (0: unknown GPU, no floor)
    min_cuda: str = "0.0"  # the oldest CUDA toolkit (major.minor) that compiles for it

    @property
    def known(self) -> bool:
        return self.model is not None

    def describe(self) -> str:
        """'h100 (0x2330, hopper)', or 'unknown device 0x1234'."""
        if self.model is None:
            return f"unknown device 0x{self.device_id}"
        return f"{self.model} (0x{self.device_id}, {self.generation})"


class CatalogError(ValueError):
    """The catalogue file is malformed (a packaging or editing mistake, caught by the unit tests)."""


def normalise_id(device_id: str) -> str:
    """'0x2330', '2330', '0X2330' and '10de:2330' all become '2330'."""
    text = device_id.strip().lower()
    text = text.rpartition(":")[2]
    text = text.removeprefix("0x")
    return text.zfill(4) if re.fullmatch(r"[0-9a-f]{1,4}", text) else text


def lookup(device_id: str) -> GpuKind:
    """The GPU a PCI device id (vendor 10de) stands for; unknown ids come back with generation 'unknown'."""
    key = normalise_id(device_id)
    return _catalog().get(key) or GpuKind(key, None, UNKNOWN, UNKNOWN)


def model_matches(spec_model: str, catalog_model: str) -> bool:
    """Does a spec's gpus.model name the catalogue's model?

    The spec's model is also the Slurm GRES type, so people qualify it
    ('a100-80gb', 'h100_sxm') or drop a prefix ('4090' for rtx4090). The
    first word that is not a prefix must be the model, whole: 'a10' is not
    an 'a100', and 'h100' is not a 'gh200'.
    """
    words = [word for word in re.split(r"[-_.\s]+", spec_model.lower()) if word]
    while len(words) > 1 and words[0] in _NOISE:
        words.pop(0)
    if not words:
        return False
    return _strip_prefix(words[0]) == _strip_prefix(catalog_model.lower())


def kind_for_model(spec_model: str) -> GpuKind | None:
    """The catalogue's GPU a spec's gpus.model names (model_matches), or None when none does.

    Several ids share a model (SXM and PCIe boards); they share its
    generation and module needs too, so the first one answers.
    """
    for kind in _catalog().values():
        if kind.model is not None and model_matches(spec_model, kind.model):
            return kind
    return None


def cuda_key(version: str) -> tuple[int, int]:
    """'12.10' as (12, 10), so versions compare as numbers ('12.10' is newer than '12.9')."""
    major, _, minor = version.partition(".")
    return int(major), int(minor or 0)


def _strip_prefix(word: str) -> str:
    for noise in sorted(_NOISE, key=len, reverse=True):
        if word.startswith(noise) and len(word) > len(noise):
            return word[len(noise) :]
    return word


@cache
def _catalog() -> dict[str, GpuKind]:
    return parse_catalog(_read(CATALOG_FILE))


def _read(path: Path) -> Any:
    import yaml  # only when a lookup happens

    with path.open(encoding="utf-8") as stream:
        return yaml.safe_load(stream)


def parse_catalog(data: Any) -> dict[str, GpuKind]:
    """The catalogue's devices by id, checked: every field present and every value one the code knows."""
    if not isinstance(data, dict) or not isinstance(data.get("generations"), dict):
        raise CatalogError("the GPU catalogue needs 'generations' and 'devices' mappings")
    generations: dict[str, dict[str, Any]] = data["generations"]
    for generation, traits in generations.items():
        if generation not in GENERATIONS or not isinstance(traits, dict):
            raise CatalogError(f"GPU catalogue: unknown generation {generation!r}")
        if traits.get("module_flavour") not in FLAVOURS or not isinstance(traits.get("open_required"), bool):
            raise CatalogError(f"GPU catalogue: generation {generation!r} needs module_flavour and open_required")
        _check_minimums(f"generation {generation!r}", traits, required=True)
    devices = data.get("devices")
    if not isinstance(devices, dict):
        raise CatalogError("the GPU catalogue needs a 'devices' mapping")
    kinds: dict[str, GpuKind] = {}
    for key, entry in devices.items():
        if not isinstance(key, str) or not re.fullmatch(r"[0-9a-f]{4}", key):
            raise CatalogError(f"GPU catalogue: device id {key!r} is not four lower-case hex digits in quotes")
        if not isinstance(entry, dict) or entry.get("generation") not in generations:
            raise CatalogError(f"GPU catalogue: device {key} has no known generation")
        model = entry.get("model")
        if not isinstance(model, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", model):
            raise CatalogError(f"GPU catalogue: device {key} needs a lower-case model name")
        _check_minimums(f"device {key}", entry, required=False)
        traits = generations[entry["generation"]]
        open_required = entry.get("open_required", traits["open_required"])
        kinds[key] = GpuKind(
            key,
            model,
            entry["generation"],
            "open" if open_required else traits["module_flavour"],
            bool(open_required),
            str(entry.get("name", "")),
            int(entry.get("min_driver_branch", traits["min_driver_branch"])),
            str(entry.get("min_cuda", traits["min_cuda"])),
        )
    return kinds


def _check_minimums(what: str, entry: dict[str, Any], *, required: bool) -> None:
    # A branch is three digits and a CUDA version major.minor in quotes, as the spec writes them.
    branch = entry.get("min_driver_branch")
    cuda = entry.get("min_cuda")
    if (branch is not None or required) and not (isinstance(branch, int) and 100 <= branch <= 999):
        raise CatalogError(f"GPU catalogue: {what} needs min_driver_branch, a three-digit driver branch")
    if (cuda is not None or required) and not (isinstance(cuda, str) and re.fullmatch(r"[0-9]+\.[0-9]+", cuda)):
        raise CatalogError(f'GPU catalogue: {what} needs min_cuda, a CUDA version like "12.8" in quotes')
