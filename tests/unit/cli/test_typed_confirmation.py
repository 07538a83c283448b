"""Deleting data asks for a name typed (users remove --delete-home, reset --purge-data): one rule for both."""

from __future__ import annotations

import pytest

from gpuclus.cli import common
from gpuclus.cli.common import require_typed_name
from gpuclus.errors import ExitCode, GpuclusError, UsageError

DELETES = "--purge-data deletes everything in the NFS export directories"


def test_the_name_given_with_the_flag_goes_on() -> None:
    require_typed_name("lab", "lab", deletes=DELETES, flag="--confirm-purge", interactive=False)


def test_another_name_is_refused_and_says_nothing_changed() -> None:
    with pytest.raises(GpuclusError) as refused:
        require_typed_name("lab", "lab2", deletes=DELETES, flag="--confirm-purge", interactive=True)
    assert refused.value.exit_code == ExitCode.FAILED
    assert "does not match lab" in str(refused.value) and "nothing was changed" in str(refused.value)


def test_without_a_terminal_the_flag_is_named_and_yes_is_not_enough() -> None:
    with pytest.raises(UsageError) as refused:
        require_typed_name("lab", None, deletes=DELETES, flag="--confirm-purge", interactive=False)
    assert str(refused.value).startswith(DELETES)
    assert refused.value.hint == "pass --confirm-purge lab (--yes is not enough)"


@pytest.mark.parametrize(("typed", "accepted"), [("lab", True), ("", False), ("LAB", False)])
def test_at_a_terminal_the_prompt_wants_the_exact_name(
    typed: str, accepted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def prompt(text: str, **_: object) -> str:
        asked.append(text)
        return typed

    monkeypatch.setattr(common.typer, "prompt", prompt)
    if accepted:
        require_typed_name("lab", None, deletes=DELETES, flag="--confirm-purge", interactive=True)
    else:
        with pytest.raises(GpuclusError):
            require_typed_name("lab", None, deletes=DELETES, flag="--confirm-purge", interactive=True)
    assert asked == [f"{DELETES}. Type lab to go on"]
