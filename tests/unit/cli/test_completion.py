"""Shell completion: the scripts for a named shell, the answers gpuclus gives them, and the completers."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuclus.cli.completion import Shell, complete_items, complete_phases
from gpuclus.cli.main import app, main
from gpuclus.deploy.phases import ORDER

runner = CliRunner()


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o default -F _gpuclus_completion gpuclus"),
        ("zsh", "#compdef gpuclus"),
        ("fish", "complete --command gpuclus"),
        ("powershell", "Register-ArgumentCompleter -Native -CommandName gpuclus"),
        ("pwsh", "Register-ArgumentCompleter -Native -CommandName gpuclus"),
    ],
)
def test_show_completion_prints_the_named_shells_script(shell: str, marker: str) -> None:
    result = runner.invoke(app, ["--show-completion", shell], prog_name="gpuclus")
    assert result.exit_code == 0, result.output
    assert marker in result.stdout
    # The script asks gpuclus itself, in the protocol its answers speak
    # (PowerShell's two names share one script).
    protocol = "powershell" if shell == "pwsh" else shell
    assert "_GPUCLUS_COMPLETE" in result.stdout and f"complete_{protocol}" in result.stdout


def test_the_shell_is_taken_as_named_not_guessed() -> None:
    # typer's own option would print the script of the shell it guesses from
    # the process tree, whatever was typed; here the name wins, in any case.
    result = runner.invoke(app, ["--show-completion", "ZSH"], prog_name="gpuclus")
    assert result.exit_code == 0
    assert result.stdout.startswith("#compdef gpuclus")


@pytest.mark.parametrize("args", [["--show-completion", "tcsh"], ["--show-completion"], ["--install-completion", "sh"]])
def test_an_unknown_or_missing_shell_is_a_usage_error(args: list[str]) -> None:
    result = runner.invoke(app, args, prog_name="gpuclus")
    assert result.exit_code == 2
    assert "completion" in result.output


def test_main_shows_completion_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--show-completion", "bash"]) == 0
    assert "_GPUCLUS_COMPLETE=complete_bash" in capsys.readouterr().out


def test_install_completion_writes_the_script_and_sources_it(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--install-completion", "bash"], prog_name="gpuclus", env={"HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    script = tmp_path / ".bash_completions" / "gpuclus.sh"
    assert "_GPUCLUS_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()


def answers(words: str) -> list[str]:
    """What gpuclus answers bash for the last word of ``words`` (as the printed script asks)."""
    parts = words.split(" ")
    env = {"_GPUCLUS_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)}
    result = runner.invoke(app, [], prog_name="gpuclus", env=env)
    assert result.exit_code == 0, result.output
    return result.stdout.split()


def test_commands_subcommands_and_shells_complete() -> None:
    assert answers("gpuclus val") == ["validate"]
    assert answers("gpuclus spec ") == ["check", "schema"]
    assert answers("gpuclus --show-completion ") == [shell.value for shell in Shell]


def test_phase_names_complete_per_comma_separated_item() -> None:
    assert complete_phases("") == [phase.value for phase in ORDER]
    assert complete_phases("n") == ["nfs", "nvidia"]
    assert complete_phases("base,n") == ["base,nfs", "base,nvidia"]
    # A phase already listed is not offered again.
    assert "base,base" not in complete_phases("base,")
    assert complete_items("a,b", ["a", "b", "bc"]) == ["a,b", "a,bc"]
