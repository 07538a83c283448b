"""gpuclus_control_path: a path on the control machine, from the rendered group_vars, made absolute.

render writes the spec's control-machine paths (artifacts, packages, credential
files, the wheelhouse, the cache) as they are when absolute, and otherwise
relative to the rendered directory, the one holding inventory/: the rendered
files then stay the same wherever the spec's directory lives, and so do the
render digest and the committed examples (docs/architecture.md, "One fact, one
place"). This filter is the one place that knows that layout. Ansible finds it
beside the playbooks (a playbook's adjacent filter_plugins/), which is where
every play gpuclus runs, and every role that reads it, comes from.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError


def control_path(value: Any, inventory_dir: Any = None) -> Any:
    """``value`` made absolute: none and '' as they are (nothing asked for), an absolute path as it is,
    a relative one joined to ``inventory_dir``'s parent with its symlinks resolved."""
    if value is None or value == "":
        return value
    if not isinstance(value, str):
        raise AnsibleFilterError(f"gpuclus_control_path: {value!r} is not a path")
    if Path(value).is_absolute():
        return value
    if not inventory_dir:
        raise AnsibleFilterError(
            f"gpuclus_control_path: {value!r} is relative to the rendered directory; no inventory_dir says where it is"
        )
    # Path.resolve is os.path.realpath: symlinks first, then '..', as the playbooks' realpath filter did.
    return str(Path(str(inventory_dir), os.pardir, value).resolve())


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"gpuclus_control_path": control_path}
