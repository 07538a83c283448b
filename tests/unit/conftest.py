"""The unit tests' shared helper modules (role_templates, validate_stubs, deploy_specs, ...) live in this folder.

The tests sit in sub-folders that mirror src/gpuclus (spec/, validate/, deploy/, ...; roles/ for the Ansible
roles), and pytest puts a test file's own folder on sys.path, not its parent: this one is added here, once, so
``from role_templates import ...`` reads the same in every sub-folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

HELPERS = str(Path(__file__).resolve().parent)
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)
