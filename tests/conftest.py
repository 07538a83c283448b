"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "inventories" / "examples"


@pytest.fixture
def repo() -> Path:
    return REPO
