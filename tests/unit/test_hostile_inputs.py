"""The whole suite of issue 40's hostile inputs, run as a user would, with a tally: its "Done when".

Every case of tests/unit/hostile_corpus.py runs in-process through typer's CliRunner (or, for the ssh
argv builder, as a call), within a deadline, and comes out as one of:

- ``hang``: still running at the deadline (a read that waits for a writer, a parse without end);
- ``traceback``: an exception escaped the command, or "Traceback" was printed;
- ``leak``: the output holds a secret's marker, a raw control or bidi character, a line longer than
  MAX_LINE, or --json printed something other than one JSON object;
- ``harmful``: accepted, and what it wrote holds the hostile value, a '.' or '..' path part, a reserved
  or numeric host name, a character beyond printable ASCII, a key no spec writes, or a link's target
  was changed;
- ``refused``: a nonzero exit whose message names the file (file:line for a spec);
- ``accepted``: exit 0, and nothing harmful in what was written.

The suite passes with 0 hang, 0 traceback, 0 leak, 0 harmful; each case's outcome is the one it
expects, and each class has a case that is refused, so accepting everything cannot pass. Run with
``-s`` to see the tally table.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
import stat
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from deadline import Blocked, within
from hostile_corpus import (
    SECRET,
    Case,
    Directory,
    Fifo,
    Link,
    Private,
    all_cases,
    spec_with,
)
from lookalikes import libc_reads_as_address
from spec_samples import BASE
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.errors import UsageError

CASES = all_cases()
CLASSES = sorted({case.klass for case in CASES})
DEADLINE_S = 20
# Longer than any line gpuclus prints (source lines are cut around the caret), far shorter than a hostile one.
MAX_LINE = 1000
# The one character beyond printable ASCII that gpuclus' own headers write, and the marks of its results.
OWN_CHARACTERS = frozenset("\u2014\u2713\u2717\u2026")
# Characters that change how a terminal shows what follows them.
BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029")
PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
# Ansible's own words for groups and the control machine, and Slurm's for its defaults record.
ANSIBLE_AND_SLURM_WORDS = frozenset({"all", "ungrouped", "localhost", "default"})

runner = CliRunner()


@dataclass
class Outcome:
    case: Case
    kind: str  # hang, traceback, leak, harmful, refused, accepted; skipped where only root can set it up
    detail: str = ""
    # Beside the kind: an expectation not met, or a refusal that does not name the file.
    mismatch: str = ""


# --- setting a case up --------------------------------------------------------------------------------------------


def substitute(text: str, directory: Path) -> str:
    return text.replace("{d}", str(directory))


class NeedsRoot(Exception):
    """A case whose setup only root can make (a link of another owner than its target's)."""


NOBODY = 65534


def make_files(directory: Path, files: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for relative, content in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Fifo):
            os.mkfifo(path)
        elif isinstance(content, Link):
            path.symlink_to(substitute(content.target, directory))
            if content.other_owner:
                if os.geteuid() != 0:
                    raise NeedsRoot(relative)
                os.lchown(path, NOBODY, NOBODY)
        elif isinstance(content, Directory):
            path.mkdir(exist_ok=True)
        elif isinstance(content, Private):
            path.write_text(content.text)
            path.chmod(0o600)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(substitute(content, directory))
            path.chmod(0o644)


def elsewhere(directory: Path) -> dict[str, tuple[int, bytes]]:
    """What lies outside the places gpuclus writes: a planted link's targets, by path, with mode and bytes."""
    found: dict[str, tuple[int, bytes]] = {}
    for root in (directory / "elsewhere", directory / "elsewhere-dir"):
        if not root.is_dir() or root.is_symlink():
            continue
        found[str(root)] = (stat.S_IMODE(root.stat().st_mode), b"")
        for path in sorted(root.rglob("*")):
            data = path.read_bytes() if path.is_file() else b""
            found[str(path)] = (stat.S_IMODE(path.lstat().st_mode), data)
    return found


# --- running it -------------------------------------------------------------------------------------------------


def invoke(argv: list[str]) -> tuple[Any, str | None]:
    """The CliRunner result, or what went wrong running it: 'hang' or a traceback's one line."""
    try:
        with within(DEADLINE_S):
            result = runner.invoke(app, argv)
    except Blocked as blocked:
        return None, f"hang: {blocked}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return result, f"traceback: {type(result.exception).__name__}: {str(result.exception)[:200]}"
    if "Traceback" in result.output:
        return result, "traceback: printed"
    return result, None


def leak_in(text: str, case: Case) -> str | None:
    for marker in (SECRET, *case.secrets):
        if marker in text:
            return f"prints {marker!r}"
    odd = sorted({char for char in text if char in BIDI or (unicodedata.category(char) == "Cc" and char not in "\n\t")})
    if odd:
        return f"prints raw {''.join(odd)!a}"
    longest = max((len(line) for line in text.splitlines()), default=0)
    if longest > MAX_LINE:
        return f"prints a line of {longest} characters"
    return None


def json_problem(stdout: str, case: Case) -> str | None:
    """Stdout is one JSON object, nothing in it is a secret, and its messages are as printable as the text's.

    Other values (the file's path as given) are data, escaped by JSON itself.
    """
    try:
        document = json.loads(stdout)
    except ValueError:
        return f"--json printed no JSON object: {stdout[:120]!a}"
    if not isinstance(document, dict):
        return "--json printed JSON that is not an object"
    problem = leak_in(stdout, case)
    if problem:
        return problem
    for marker in (SECRET, *case.secrets):
        if any(marker in text for text in strings_in(document)):
            return f"holds {marker!r}"
    return leak_in("\n".join(messages_in(document)), case)


def messages_in(value: Any) -> Iterator[str]:
    """The values of every "message" and "hint": what a script shows its user."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in {"message", "hint"} and isinstance(item, str):
                yield item
            else:
                yield from messages_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from messages_in(item)


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def run_call(case: Case, directory: Path) -> Outcome:
    """A case that calls a function: a UsageError is its refusal, a value its acceptance."""
    assert case.call is not None
    try:
        with within(DEADLINE_S):
            value = case.call(directory)
    except Blocked as blocked:
        return Outcome(case, "hang", str(blocked))
    except UsageError as refusal:
        text = f"{refusal.message}\n{refusal.hint}"
        leak = leak_in(text, case)
        if leak:
            return Outcome(case, "leak", leak)
        named = re.search(case.names, text) is not None
        return Outcome(case, "refused", refusal.message[:160], "" if named else f"refusal names no {case.names!r}")
    except Exception as problem:  # what the suite counts: anything but a refusal escaping is a traceback
        return Outcome(case, "traceback", f"{type(problem).__name__}: {str(problem)[:200]}")
    problem = case.check(directory, json.dumps(value)) if case.check is not None else None
    return Outcome(case, "harmful", problem) if problem else Outcome(case, "accepted")


def run_case(case: Case, base: Path) -> Outcome:
    directory = base / case.where
    try:
        make_files(directory, dict(case.files))
    except NeedsRoot as needs:
        return Outcome(case, "skipped", f"only root can make {needs}")
    outcome = run_call(case, directory) if case.call is not None else run_command(case, directory)
    expected = case.expect
    if outcome.kind in {"refused", "accepted"} and outcome.kind != expected and not outcome.mismatch:
        outcome.mismatch = f"expected {expected}, got {outcome.kind}: {outcome.detail[:160]}"
    return outcome


def run_command(case: Case, directory: Path) -> Outcome:
    before = elsewhere(directory)
    argv = [substitute(word, directory) for word in case.argv]
    result, problem = invoke(argv)
    if problem is not None:
        kind, _, detail = problem.partition(": ")
        return Outcome(case, kind, detail)
    output = result.output
    leak = leak_in(output, case)
    if leak:
        return Outcome(case, "leak", leak)
    if case.json_twin and "--json" not in argv:
        # Before a '--', after which it would be an argument.
        at = argv.index("--") if "--" in argv else len(argv)
        twin, problem = invoke([*argv[:at], "--json", *argv[at:]])
        if problem is not None:
            kind, _, detail = problem.partition(": ")
            return Outcome(case, kind, f"with --json: {detail}")
        leak = json_problem(twin.stdout, case) or leak_in(twin.stderr, case)
        if leak:
            return Outcome(case, "leak", f"with --json: {leak}")
        if twin.exit_code != result.exit_code:
            return Outcome(case, "traceback", f"exit {result.exit_code}, with --json {twin.exit_code}")
    changed = [path for path, state in elsewhere(directory).items() if before.get(path) != state]
    changed += [path for path in before if not Path(path).exists()]
    if changed:
        return Outcome(case, "harmful", f"changed outside the output: {changed}")
    if result.exit_code != 0:
        named = re.search(substitute(case.names, re.escape(str(directory))), output) is not None
        first = next((line for line in output.splitlines() if "error" in line), output[:160])
        return Outcome(case, "refused", first[:200], "" if named else f"refusal names no {case.names!r}: {first[:160]}")
    harm = accepted_harm(case, directory, argv, output)
    return Outcome(case, "harmful", harm) if harm else Outcome(case, "accepted")


# --- what an accepted case wrote ----------------------------------------------------------------------------------


def accepted_harm(case: Case, directory: Path, argv: list[str], output: str) -> str | None:
    if case.check is not None:
        problem = case.check(directory, output)
        if problem:
            return problem
    if case.renders is None:
        return None
    out = directory / "out"
    if argv[0] != "render":
        rendered, problem = invoke(["render", str(directory / case.renders), "-o", str(out)])
        if problem is not None:
            return f"its render: {problem}"
        if rendered.exit_code != 0:
            return f"accepted, then its render exited {rendered.exit_code}: {rendered.output[:160]}"
        leak = leak_in(rendered.output, case)
        if leak:
            return f"its render {leak}"
    return rendered_harm(out, case.harmful)


def rendered_harm(out: Path, harmful: tuple[str, ...]) -> str | None:
    files = {
        str(path.relative_to(out)): path.read_text(encoding="utf-8")
        for path in sorted(out.rglob("*"))
        if path.is_file() and path.name != ".gpuclus-render.json"
    }
    for name, text in files.items():
        odd = {char for char in text if not (" " <= char <= "~" or char == "\n" or char in OWN_CHARACTERS)}
        if odd:
            return f"{name} holds {''.join(sorted(odd))!a}"
        for value in harmful:
            if value in text:
                return f"{name} holds {value[:60]!a}"
    hosts = yaml.safe_load(files["inventory/hosts.yml"])
    problem = inventory_problem(hosts)
    if problem:
        return problem
    for name, text in files.items():
        if name.startswith("inventory/group_vars/"):
            problem = group_vars_problem(name, yaml.safe_load(text) or {})
            if problem:
                return problem
    return None


@functools.cache
def play_words() -> frozenset[str]:
    """Every word a playbook's `hosts:` names: a node of that name would be run by that play."""
    return frozenset(
        word.lstrip("&!")
        for playbook in PLAYBOOKS.glob("*.yml")
        for play in yaml.safe_load(playbook.read_text(encoding="utf-8")) or []
        if "hosts" in play
        for word in re.split(r"[:,]", str(play["hosts"]))
    )


def group_names(tree: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, group in tree.items():
        if isinstance(group, dict):
            yield str(name), group
            yield from group_names(group.get("children") or {})


def inventory_problem(hosts: dict[str, Any]) -> str | None:
    groups = dict(group_names(hosts))
    taken = {name.casefold() for name in groups} | play_words() | ANSIBLE_AND_SLURM_WORDS
    nodes = groups["cluster"].get("hosts") or {}
    for name, variables in nodes.items():
        address = (variables or {}).get("ansible_host", "")
        if not (isinstance(name, str) and name.isascii() and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name)):
            return f"inventory host {name!a}"
        if name.casefold() in taken:
            return f"inventory host {name} is a group's or a tool's word"
        if libc_reads_as_address(name):
            return f"inventory host {name} reads as an address"
        if not canonical_address_or_name(str(address)):
            return f"{name}'s ansible_host {address!a}"
    listed = {host for _name, group in groups.items() for host in (group.get("hosts") or {})}
    if not listed <= set(nodes):
        return f"hosts in groups but not in cluster: {sorted(listed - set(nodes))}"
    return None


def canonical_address_or_name(address: str) -> bool:
    try:
        return str(ipaddress.IPv4Address(address)) == address
    except ValueError:
        return not libc_reads_as_address(address) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", address) is not None


def group_vars_problem(name: str, variables: dict[str, Any]) -> str | None:
    extra = set(variables) - known_keys().get(name, set())
    if extra:
        return f"{name} has keys no reference spec writes: {sorted(extra)}"
    for value in strings_in(variables):
        if value.startswith("/") and {".", ".."} & set(value.split("/")):
            return f"{name} holds the path {value!a}"
    return None


# Specs whose render writes every key a group_vars file may hold: BASE, and BASE with the optional sections on.
REFERENCE_CHANGES: list[list[tuple[str, Any]]] = [
    [],
    [
        ("modules", {"lmod": True, "path": "/srv/home/modules"}),
        ("pytorch", {"install": True, "location": "shared", "prefix": "/home/sw"}),
        ("monitoring", {"alertmanager": True, "alert_receiver": {"webhook_url": "https://hooks.example.org/x"}}),
        ("users", {"file": "users.yaml"}),
    ],
]


@functools.cache
def known_keys() -> dict[str, set[str]]:
    from gpuclus.render import render_files
    from gpuclus.spec.load import load_spec_text

    keys: dict[str, set[str]] = {}
    for changes in REFERENCE_CHANGES:
        loaded = load_spec_text(spec_with(*changes))
        assert loaded.spec is not None and loaded.topology is not None, loaded.findings
        files = render_files(
            loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="../.gpuclus", known_hosts="/k"
        )
        for file_name, text in files.items():
            if file_name.startswith("inventory/group_vars/"):
                keys.setdefault(file_name, set()).update(yaml.safe_load(text) or {})
    return keys


# --- the tally ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], list[Outcome]]:
    """Each class's outcomes, run once however many tests read them."""
    done: dict[int, list[Outcome]] = {}

    def of_class(klass: int) -> list[Outcome]:
        if klass not in done:
            done[klass] = [
                run_case(case, tmp_path_factory.mktemp(f"c{klass}-")) for case in CASES if case.klass == klass
            ]
        return done[klass]

    return of_class


def describe(outcome: Outcome) -> str:
    return f"  {outcome.case.name}: {outcome.kind}: {outcome.mismatch or outcome.detail}"[:300]


@pytest.mark.parametrize("klass", CLASSES, ids=lambda klass: f"class-{klass}")
def test_every_hostile_input_of_the_class_is_refused_or_harmless(
    klass: int, outcomes: Callable[[int], list[Outcome]]
) -> None:
    found = outcomes(klass)
    bad = [outcome for outcome in found if outcome.kind not in {"refused", "accepted", "skipped"} or outcome.mismatch]
    assert not bad, f"class {klass}: {len(bad)} of {len(found)} cases went wrong:\n" + "\n".join(map(describe, bad))
    assert any(outcome.kind == "refused" for outcome in found), f"class {klass}: nothing was refused"


def test_the_corpus_covers_every_class_with_enough_cases() -> None:
    counts = Counter(case.klass for case in CASES)
    assert sorted(counts) == list(range(1, 11))
    assert len(CASES) >= 150, len(CASES)
    assert all(counts[klass] >= 5 for klass in counts), counts
    assert all(case.expect in {"refused", "accepted"} for case in CASES)


def test_the_tally(outcomes: Callable[[int], list[Outcome]]) -> None:
    kinds = ["refused", "accepted", "hang", "traceback", "leak", "harmful", "mismatch", "skipped"]
    rows = []
    totals: Counter[str] = Counter()
    for klass in CLASSES:
        counted = Counter(outcome.kind for outcome in outcomes(klass))
        counted["mismatch"] = sum(1 for outcome in outcomes(klass) if outcome.mismatch)
        totals.update(counted)
        rows.append(f"{klass:>5} " + " ".join(f"{counted[kind]:>9}" for kind in kinds))
    header = "class " + " ".join(f"{kind:>9}" for kind in kinds)
    footer = "  all " + " ".join(f"{totals[kind]:>9}" for kind in kinds)
    print("\n" + "\n".join([header, *rows, footer]))
    assert {kind: totals[kind] for kind in ("hang", "traceback", "leak", "harmful")} == dict.fromkeys(
        ("hang", "traceback", "leak", "harmful"), 0
    )
    assert totals["refused"] + totals["accepted"] + totals["skipped"] == len(CASES)
    assert totals["mismatch"] == 0


def test_the_unchanged_base_is_accepted_and_renders_plain_files(tmp_path: Path) -> None:
    # The checks above are not so strict that a valid spec fails them.
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(BASE))
    result = runner.invoke(app, ["render", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert rendered_harm(tmp_path / "out", ()) is None


def test_the_checks_of_what_was_written_see_each_kind_of_harm(tmp_path: Path) -> None:
    # Each check, fed a rendered directory with one harm planted, says so: none of them can pass vacuously.
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(BASE))
    out = tmp_path / "out"
    assert runner.invoke(app, ["render", str(spec), "-o", str(out)]).exit_code == 0
    nfs, hosts = out / "inventory/group_vars/all/nfs.yml", out / "inventory/hosts.yml"
    originals = {path: path.read_text() for path in (nfs, hosts)}
    for path, old, new, said in (
        (nfs, "path: /srv/home", "path: /srv/home/../../etc", "holds the path"),
        (nfs, "gpuclus_nfs_client_options:", "ansible_ssh_common_args: x\ngpuclus_nfs_client_options:", "keys no"),
        (nfs, "rw,hard", "rw,h\u0430rd", "holds"),
        (hosts, "gpu02:\n          ansible_host", "localhost:\n          ansible_host", "tool's word"),
        (hosts, "gpu02:\n          ansible_host", "0x7f.1:\n          ansible_host", "reads as an address"),
        (hosts, "ansible_host: 10.0.0.12", "ansible_host: 127.1", "ansible_host"),
    ):
        path.write_text(originals[path].replace(old, new, 1))
        assert said in (rendered_harm(out, ()) or ""), (old, new)
        path.write_text(originals[path])
    assert rendered_harm(out, ("10.0.0.12",)) == "inventory/group_vars/all/cluster.yml holds '10.0.0.12'"
    assert rendered_harm(out, ()) is None


def test_the_output_checks_see_each_kind_of_leak() -> None:
    case = Case("probe", 6, "refused", secrets=("T0K3N",))
    for text, said in (
        (f"error: {SECRET}", "prints"),
        ("error: T0K3N", "prints"),
        ("error: a\x1b[2Jb", "raw"),
        ("error: a\u202eb", "raw"),
        ("x" * (MAX_LINE + 1), "a line of"),
    ):
        assert said in (leak_in(text, case) or ""), text
    assert leak_in("error: cluster.yaml:3:1: a\\x1b[2Jb \u2014 fine", case) is None
    assert json_problem('{"error": {"message": "a\\u001bb"}}', case) == "prints raw '\\x1b'"
    assert json_problem('{"file": "a\\u001bb"}', case) is None
    assert "no JSON object" in (json_problem("", case) or "")
