"""The grammar of Enroot's registry credentials file, checked without ever showing its content.

Enroot reads ``~/.config/enroot/.credentials`` with one grep per registry,
``^machine[[:space:]]+HOST[[:space:]]+login[[:space:]]+USER...``, on a single
line: an entry must be exactly ``machine HOST login USER password PASSWORD``
on one line, starting at its first column. The multi-line entries that
netrc(5) allows are never found, and neither is an entry indented by a space.

Every token of the file is a secret or sits next to one, so the problems
returned here name line numbers, word counts and word positions only.
"""

from __future__ import annotations

# The keywords and where they stand among a line's six words (0-based).
KEYWORDS: tuple[tuple[int, str], ...] = ((0, "machine"), (2, "login"), (4, "password"))
ENTRY = "`machine HOST login USER password PASSWORD`"
# Far more than any list of registries; a bigger file is the wrong file.
MAX_BYTES = 256 * 1024

Problem = tuple[int, str]  # (1-based line number, what is wrong with it)


def credentials_problems(data: bytes) -> list[Problem]:
    """Every line of ``data`` that Enroot would not read as one entry; [] when all are fine.

    Blank lines and lines whose first non-blank character is '#' are
    comments. Line 0 stands for the file as a whole (not UTF-8, no entry).
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [(0, "the file is not UTF-8 text")]
    problems: list[Problem] = []
    entries = 0
    for number, line in enumerate(text.split("\n"), start=1):
        if line.endswith("\r"):
            problems.append((number, "ends with a carriage return (Windows line ending); save the file with Unix ones"))
            line = line[:-1]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        problem = _entry_problem(line)
        if problem is None:
            entries += 1
        else:
            problems.append((number, problem))
    if entries == 0 and not problems:
        problems.append((0, f"the file holds no entry; write one {ENTRY} line per registry"))
    return problems


def _entry_problem(line: str) -> str | None:
    words = line.split()
    if line[0].isspace():
        return f"starts with a blank; Enroot finds an entry only where `machine` begins the line, as in {ENTRY}"
    if len(words) != 6:
        found = f"found {len(words)} word{'' if len(words) == 1 else 's'}"
        if len(words) < 6 and words[0] in {keyword for _index, keyword in KEYWORDS}:
            return f"expected {ENTRY}, {found}; Enroot reads an entry from one line (not netrc's multi-line form)"
        return f"expected {ENTRY}, {found}"
    wrong = [f"word {index + 1} must be `{keyword}`" for index, keyword in KEYWORDS if words[index] != keyword]
    if wrong:
        return f"expected {ENTRY}: {', '.join(wrong)}"
    return None
