"""The README is a front door, and every command it shows must work as written.

Each `gpuclus ...` command in the README's ```bash blocks (and in its inline code) must name a real command of
the typer app with options that command has; each `bash scripts/X` must exist; every relative link in the
README, docs/ and benchmarks/README.md must reach a file, and a heading there when it names one. The README
stays at most 200 lines: reference lives in docs/.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer

from gpuclus.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINKED_PAGES = [README, ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 200

FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)
# Where one shell command ends and the next begins on a line.
SEPARATORS = {"&&", "||", ";", "|"}
# typer's context settings give every command these.
HELP_OPTIONS = {"-h", "--help"}


@cache
def _root_command() -> Any:
    return typer.main.get_command(app)


def _options(command: Any) -> set[str]:
    names = set(HELP_OPTIONS)
    for param in command.params:
        if getattr(param, "param_type_name", "") == "option":
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


def problems_with(words: list[str]) -> list[str]:
    """What is wrong with one `gpuclus ...` command line (its words, gpuclus first); empty when it is real."""
    command = _root_command()
    path = ["gpuclus"]
    rest = words[1:]
    # Walk the groups down to a command: a group's words are its own options, then a subcommand.
    while hasattr(command, "commands"):
        while rest and rest[0].startswith("-"):
            option = rest.pop(0).split("=", 1)[0]
            if option not in _options(command):
                return [f"{' '.join(path)} has no option {option}"]
        if not rest:
            return []  # a group alone prints its help
        name = rest.pop(0)
        if name not in command.commands:
            return [f"{' '.join(path)} has no command {name!r}"]
        command = command.commands[name]
        path.append(name)
    known = _options(command)
    problems: list[str] = []
    for word in rest:
        if word == "--":
            break  # the rest goes to another program (sandbox ssh NODE -- CMD)
        if word.startswith("-") and len(word) > 1 and not word.lstrip("-").isdigit():
            option = word.split("=", 1)[0]
            if option not in known:
                problems.append(f"{' '.join(path)} has no option {option}")
    return problems


def _shell_commands(line: str) -> list[list[str]]:
    """Split one shell line into its simple commands' words (comments dropped)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for word in lexer:
        if word in SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    return [words for words in commands if words]


def _bash_lines(text: str) -> list[str]:
    lines: list[str] = []
    for language, body in FENCE.findall(text):
        if language not in ("bash", "sh"):
            continue
        # A trailing backslash continues the command on the next line.
        joined = re.sub(r"\\\n", " ", body)
        lines.extend(line for line in joined.splitlines() if line.strip())
    return lines


def _without_fences(text: str) -> str:
    return FENCE.sub("", text)


def _gpuclus_words(words: list[str]) -> list[str] | None:
    """The words from `gpuclus` on, where the command runs gpuclus (also as .venv/bin/gpuclus)."""
    for index, word in enumerate(words):
        if word == "gpuclus" or word.endswith("/gpuclus"):
            return ["gpuclus", *words[index + 1 :]]
        if "=" not in word and word not in ("sudo", "env", "exec"):
            return None  # another program (its arguments may mention gpuclus)
    return None


def readme_commands(text: str) -> list[list[str]]:
    """Every gpuclus command line the text shows: in its bash blocks and in inline code outside them."""
    found = []
    for line in _bash_lines(text):
        for words in _shell_commands(line):
            command = _gpuclus_words(words)
            if command is not None:
                found.append(command)
    for span in INLINE_CODE.findall(_without_fences(text)):
        span = " ".join(span.split())
        if span.startswith("gpuclus ") and "|" not in span and "..." not in span:
            for words in _shell_commands(span):
                command = _gpuclus_words(words)
                if command is not None:
                    found.append(command)
    return found


def scripts_named(text: str) -> list[str]:
    return [words[1] for line in _bash_lines(text) for words in _shell_commands(line) if words[0] == "bash"]


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): move reference to docs/"
    )


def test_the_readme_opens_with_the_two_commands() -> None:
    first_block = FENCE.search(README.read_text())
    assert first_block is not None
    assert scripts_named(first_block.group(0)) == ["scripts/quickstart.sh", "scripts/test.sh"]


def test_every_gpuclus_command_in_the_readme_is_real() -> None:
    commands = readme_commands(README.read_text())
    assert len(commands) >= 8, "the README shows a real cluster in about eight commands"
    problems = [f"`{' '.join(words)}`: {problem}" for words in commands for problem in problems_with(words)]
    assert problems == []


def test_every_gpuclus_command_in_the_docs_bash_blocks_is_real() -> None:
    problems: list[str] = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for line in _bash_lines(page.read_text()):
            for words in _shell_commands(line):
                command = _gpuclus_words(words)
                if command is not None:
                    problems.extend(f"{page.name}: `{' '.join(command)}`: {p}" for p in problems_with(command))
    assert problems == []


def test_every_script_the_readme_runs_exists() -> None:
    scripts = scripts_named(README.read_text())
    assert "scripts/quickstart.sh" in scripts
    missing = [script for script in scripts if not (ROOT / script).is_file()]
    assert missing == []


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("gpuclus deploy --made-up-option", "gpuclus deploy has no option --made-up-option"),
        ("gpuclus frobnicate cluster.yaml", "gpuclus has no command 'frobnicate'"),
        ("gpuclus sandbox explode", "gpuclus sandbox has no command 'explode'"),
        ("gpuclus validate --level=full --nodez gpu01", "gpuclus validate has no option --nodez"),
        ("gpuclus --not-an-option deploy", "gpuclus has no option --not-an-option"),
    ],
)
def test_a_made_up_command_or_option_is_caught(line: str, problem: str) -> None:
    text = f"# x\n\n```bash\ncd demo && {line}   # a comment\n```\n"
    commands = readme_commands(text)
    assert commands == [shlex.split(line)]
    assert problems_with(commands[0]) == [problem]


def test_real_commands_pass_and_what_follows_a_double_dash_is_left_alone() -> None:
    text = (
        "```bash\n"
        "gpuclus init --name lab \\\n    --gpus-per-node 8   # continued\n"
        "gpuclus sandbox ssh sandbox-head -- sinfo --long\n"
        "gpuclus runs list && gpuclus runs show ID\n"
        "```\n"
        "Also inline: `gpuclus deploy --reboot`, not `gpuclus users add|remove|list`.\n"
    )
    commands = readme_commands(text)
    assert [words[:3] for words in commands] == [
        ["gpuclus", "init", "--name"],
        ["gpuclus", "sandbox", "ssh"],
        ["gpuclus", "runs", "list"],
        ["gpuclus", "runs", "show"],
        ["gpuclus", "deploy", "--reboot"],
    ]
    assert [problems_with(words) for words in commands] == [[]] * 5


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without markup, lower case, punctuation dropped."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return kept.replace(" ", "-")


def anchors_of(path: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for _, heading in HEADING.findall(_without_fences(path.read_text())):
        anchor = github_anchor(heading)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        anchors.add(anchor if count == 0 else f"{anchor}-{count}")
    return anchors


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    problems: list[str] = []
    for target in LINK.findall(_without_fences(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / file_part).resolve() if file_part else page
        if not destination.exists():
            problems.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors_of(destination):
            problems.append(f"{page.relative_to(root)}: {target} (no heading #{anchor} there)")
    return problems


@pytest.mark.parametrize("page", LINKED_PAGES, ids=[str(page.relative_to(ROOT)) for page in LINKED_PAGES])
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Exit codes\n\n## Exit codes\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#exit-codes) [second](other.md#exit-codes-1) [web](https://example.org/x)\n"
        "[gone](missing.md) [no heading](other.md#exit-code)\n"
        "```\n[inside a code block](missing-too.md)\n```\n"
    )
    problems = [problem.split(": ", 1)[1] for problem in broken_links(page, tmp_path)]
    assert problems == ["missing.md (no such file)", "other.md#exit-code (no heading #exit-code there)"]


def test_github_anchors() -> None:
    assert github_anchor("`gpuclus preflight [FILE]`") == "gpuclus-preflight-file"
    assert github_anchor("The deep-learning layer (`workloads.py`)") == "the-deep-learning-layer-workloadspy"
    assert github_anchor("Why Python 3.11") == "why-python-311"
    assert github_anchor("[Links](x.md) and `code`: done") == "links-and-code-done"


def test_the_readme_links_every_docs_page_and_the_benchmarks() -> None:
    linked = {target.partition("#")[0] for target in LINK.findall(README.read_text())}
    pages = {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")} | {"benchmarks/README.md"}
    assert sorted(pages - linked) == []
