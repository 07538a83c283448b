"""A role never restates the spec's defaults: the model is the one place a default is written.

A role variable the spec decides reads the rendered `gpuclus_*` value in its
defaults with no literal fallback (`| default('kernel')` was a second copy of
`nfs.server_impl`'s default, free to drift); render writes every such value
into every inventory, and a caller without one sets the role's variable. The table below names, for each
such variable, the spec field it comes from: rendered for a spec that says
nothing, the role's default must be the model's own default, read from the
pydantic fields, so a role that hard-codes its value again fails here as soon
as the two differ.
"""

from __future__ import annotations

import re
import typing
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from role_templates import ROLES, default_group_vars, role_variables

from gpuclus.spec.models import ClusterSpec

# role variable -> the spec field whose default it must have for a spec that sets nothing.
SPEC_FIELDS = {
    "nvidia_driver_branch": "nvidia.driver.branch",
    "nvidia_driver_source": "nvidia.driver.source",
    "nvidia_driver_kernel_modules": "nvidia.driver.kernel_modules",
    "nvidia_driver_fabric_manager": "nvidia.fabric_manager",
    "nvidia_driver_dcgm": "nvidia.dcgm",
    "cuda_toolkit_version": "nvidia.cuda.version",
    "cuda_toolkit_source": "nvidia.cuda.source",
    "enroot_version": "containers.enroot_version",
    "enroot_allow_unchecked": "containers.allow_unverified_downloads",
    "pyxis_version": "containers.pyxis_version",
    "nfs_server_impl": "nfs.server_impl",
    "nfs_client_options": "nfs.client_options",
    "slurm_common_controller_timeout": "slurm.controller_timeout",
    "slurm_common_priority_calc_period": "slurm.priority_calc_period",
    "grafana_unavailable": "monitoring.grafana_unavailable",
}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def spec_default(path: str) -> Any:
    """The default of a spec field, from the models' declarations (a dotted path of field names or aliases)."""
    model: type[BaseModel] = ClusterSpec
    *parents, leaf = path.split(".")
    for part in parents:
        field = next(f for name, f in model.model_fields.items() if part in (name, f.alias))
        found = _model_of(field.annotation)
        assert found is not None, f"{path}: {part} holds no model"
        model = found
    field = next(f for name, f in model.model_fields.items() if leaf in (name, f.alias))
    assert field.default is not PydanticUndefined, f"{path} has no default"
    return field.default


def role_of(variable: str) -> str:
    return max((role.name for role in ROLES.iterdir() if variable.startswith(role.name + "_")), key=len)


@pytest.mark.parametrize(("variable", "path"), sorted(SPEC_FIELDS.items()))
def test_a_role_default_is_the_specs_default(variable: str, path: str) -> None:
    variables = role_variables(role_of(variable), default_group_vars(), "gpu01", {"inventory_dir": "/lab/r/inventory"})
    value = Templar(loader=DataLoader(), variables=variables).template(trust_as_template("{{ " + variable + " }}"))
    expected = spec_default(path)
    assert value == getattr(expected, "value", expected), f"{variable} is not {path}'s default"


# `gpuclus_x | default(<literal>)` where the literal is what render writes for a spec that sets nothing: a
# second copy of the spec's default beside the rendered value. (A marker for a message, such as 'unset', or
# a sentinel path restates nothing, and neither does a fallback to nothing.)
# Falling back to nothing states no default of the spec's.
NOTHING: list[Any] = [None, "", [], {}]
NOT_A_VALUE = object()
FALLBACK = re.compile(r"\b(gpuclus_\w+)\s*\|\s*default\(\s*([^)]*?)\s*\)")


def _first_argument(arguments: str) -> Any:
    """default()'s fallback read as YAML (`'', true` is '' then the boolean flag); an expression is no value."""
    try:
        return yaml.safe_load(f"[{arguments}]")[0]
    except (yaml.YAMLError, IndexError):
        return NOT_A_VALUE


def test_no_role_falls_back_to_a_copy_of_the_specs_default() -> None:
    rendered = default_group_vars()
    found = []
    for path in sorted(ROLES.glob("*/*/*.yml")) + sorted(ROLES.glob("*/templates/**/*.j2")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name, literal in FALLBACK.findall(line):
                value = _first_argument(literal)
                if name in rendered and value not in NOTHING and value == rendered[name]:
                    found.append(f"{path.relative_to(ROLES)}:{number}: {name} | default({literal})")
    assert found == []


def test_the_table_names_real_fields_and_real_role_variables() -> None:
    # A renamed field or variable must fail here, not skip its check.
    for variable, path in SPEC_FIELDS.items():
        spec_default(path)
        role = role_of(variable)
        assert variable in (ROLES / role / "defaults" / "main.yml").read_text(), variable
