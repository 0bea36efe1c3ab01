"""Measurements in docs/ name where they came from (issue 25 item 8).

Every Markdown table in docs/*.md that holds measurements must be preceded, within
``WITHIN`` lines, by one provenance line of the form

    Measured at <commit> (<YYYY-MM-DD>); JSON: [docs/results/....json](...)
    Measured at <commit> … <commit> (<YYYY-MM-DD> … <YYYY-MM-DD>), <detail>; JSON: [...](...)

(a range where the rows were measured in different commits). Every figure of the table comes
from a committed JSON the line links to: "JSON: not kept" is refused (issue 25 item 8: its
JSON beside each table), so a run whose JSON was lost is measured again or its figures leave
the table.

A table holds measurements when at least two of its body cells carry a decimal number
(``0.631``), a number with a thousands separator (``4,561``) or a number with a unit (µs, ms,
KB, MiB, GiB, %); text in inline code (setting defaults, commands) does not count. Layouts,
endpoints, settings and metric tables have none of these in two cells; the pages and tables
that do and are exempt are listed in ``EXEMPT_PAGES`` and ``EXEMPT_TABLES`` with the reason.

Checked: the line is there and names a commit and a date; every linked JSON exists; in a full
git checkout every commit it names exists, the range's first commit is an ancestor of its last,
and each date is not before its commit's author date (a measurement cannot predate the commit it
was made at). The git part is skipped outside a git checkout and in a shallow clone.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
WITHIN = 3  # lines above the table's header row that may hold the provenance line

#: Pages not checked at all.
EXEMPT_PAGES = {
    "configuration.md": "generated from the settings (defaults and descriptions), not measured",
}

#: (page, start of the header row) -> why that table has no "Measured at" line.
_KT_REASON = "knowledge-transfer.md gives the commit and JSONs in the paragraph above"
EXEMPT_TABLES = {
    ("knowledge-transfer.md", "| data | NE vm (fair) | NE fm |"): (
        _KT_REASON + " ('solaris evaluate at 42ed6ba', JSONs in results/issue22/, each JSON "
        "carrying its commit and date)"
    ),
    ("knowledge-transfer.md", "| data | NE vm (fair / id-only) |"): (
        _KT_REASON + " (a commit column per row; JSONs in results/issue22/before-state-tier/)"
    ),
    ("knowledge-transfer.md", "| FM task → VM task |"): (
        _KT_REASON + " ('the table is from 311b4d0', JSONs in results/issue22/before-state-tier/)"
    ),
    ("knowledge-transfer.md", "| served VM | TR | NE |"): (
        _KT_REASON + " (2026-12-04, working tree on fc1808c, cross-task-ml-100k-engine.json)"
    ),
}

_FENCE = re.compile(r"^(```|~~~)")
_DELIMITER = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_CODE = re.compile(r"`[^`]*`")
_MEASURE = re.compile(r"\d\.\d|\d,\d{3}(?!\d)|\d\s?(?:µs|ms|KB|KiB|MB|MiB|GB|GiB|%)(?![A-Za-z])")
_SEP = r"\s*(?:…|\.\.\.)\s*"
_HASH = r"[0-9a-f]{7,40}"
_DATE = r"\d{4}-\d{2}-\d{2}"
PROVENANCE = re.compile(
    rf"^Measured at (?P<first>{_HASH})(?:{_SEP}(?P<last>{_HASH}))?"
    rf" \((?P<d1>{_DATE})(?:{_SEP}(?P<d2>{_DATE}))?\)"
    r".*;\s*JSON: \["
)
#: Any commit the line names (in a detail too): 7-40 hex characters with at least one digit.
_ANY_HASH = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
_LINK = re.compile(r"\[[^\]]*\]\(\s*([^)\s]+)\s*\)")


@dataclass(frozen=True)
class Table:
    line: int  # 1-based line of the header row
    header: str
    before: tuple[str, ...]  # up to WITHIN lines above the header, nearest last
    measured: bool


def tables(text: str) -> list[Table]:
    """Every Markdown table of ``text`` outside fenced code."""
    lines = text.splitlines()
    out, fenced, i = [], False, 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line.strip()):
            fenced = not fenced
        elif (
            not fenced
            and line.lstrip().startswith("|")
            and i + 1 < len(lines)
            and _DELIMITER.match(lines[i + 1])
        ):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            cells = [
                cell
                for row in lines[i + 2 : j]
                for cell in _CODE.sub("", row).strip().strip("|").split("|")
            ]
            measured = sum(1 for c in cells if _MEASURE.search(c)) >= 2
            out.append(Table(i + 1, line.strip(), tuple(lines[max(0, i - WITHIN) : i]), measured))
            i = j
            continue
        i += 1
    return out


@functools.cache
def _git_history() -> bool:
    """A full (not shallow) git checkout with git on the PATH."""
    if shutil.which("git") is None:
        return False
    try:
        inside = _git("rev-parse", "--is-inside-work-tree")
        shallow = _git("rev-parse", "--is-shallow-repository")
    except subprocess.CalledProcessError:
        return False
    return inside == "true" and shallow == "false"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _commit_exists(commit: str) -> bool:
    try:
        _git("cat-file", "-e", f"{commit}^{{commit}}")
    except subprocess.CalledProcessError:
        return False
    return True


def _commit_date(commit: str) -> dt.date:
    return dt.date.fromisoformat(_git("log", "-1", "--format=%as", commit))


def _is_ancestor(first: str, last: str) -> bool:
    try:
        _git("merge-base", "--is-ancestor", first, last)
    except subprocess.CalledProcessError:
        return False
    return True


def line_problems(line: str, page: Path, check_git: bool) -> list[str]:
    """What is wrong with one provenance line (empty: nothing)."""
    m = PROVENANCE.match(line)
    if m is None:
        return [f"not of the form 'Measured at <commit> (<date>); JSON: [...](...)': {line!r}"]
    problems = []
    if "not kept" in line:
        problems.append("names figures whose JSON was not kept (each figure needs its JSON)")
    for target in _LINK.findall(line):
        if target.endswith(".json") or "results/" in target:
            path = (page.parent / target.partition("#")[0]).resolve()
            if not path.exists():
                problems.append(f"linked JSON {target} does not exist")
    for date in (m["d1"], m["d2"]):
        if date is not None:
            try:
                dt.date.fromisoformat(date)
            except ValueError:
                problems.append(f"{date} is not a date")
    if problems or not check_git:
        return problems
    for commit in dict.fromkeys(_ANY_HASH.findall(line)):
        if not _commit_exists(commit):
            problems.append(f"commit {commit} is not in the git history")
    if problems:
        return problems
    pairs = [(m["first"], m["d1"])]
    if m["last"] is not None:
        pairs.append((m["last"], m["d2"] or m["d1"]))
        if not _is_ancestor(m["first"], m["last"]):
            problems.append(f"{m['first']} is not an ancestor of {m['last']}")
    for commit, date in pairs:
        made = _commit_date(commit)
        if dt.date.fromisoformat(date) < made:
            problems.append(f"{date} is before {commit}'s date {made}")
    return problems


def provenance_problems(page: Path, check_git: bool) -> list[str]:
    """Every measurement table of ``page`` without a valid provenance line, one line each."""
    problems = []
    for table in tables(page.read_text(encoding="utf-8")):
        if not table.measured or any(
            page.name == name and table.header.startswith(start) for name, start in EXEMPT_TABLES
        ):
            continue
        where = f"{page.name}:{table.line} {table.header[:60]!r}"
        marked = [ln.strip() for ln in table.before if ln.strip().startswith("Measured at")]
        if not marked:
            problems.append(f"{where}: no 'Measured at' line in the {WITHIN} lines above")
            continue
        problems += [f"{where}: {p}" for p in line_problems(marked[-1], page, check_git)]
    return problems


def _pages() -> list[Path]:
    return [p for p in sorted(DOCS.glob("*.md")) if p.name not in EXEMPT_PAGES]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_measurement_tables_name_their_commit_and_json(page: Path) -> None:
    assert provenance_problems(page, _git_history()) == []


def test_exempt_tables_still_exist() -> None:
    """An exemption whose table is gone or renamed is removed, not left to excuse a new one."""
    stale = [
        (name, start)
        for name, start in EXEMPT_TABLES
        if not any(
            t.measured and t.header.startswith(start)
            for t in tables((DOCS / name).read_text(encoding="utf-8"))
        )
    ]
    assert stale == []


def test_rule_tells_measurements_from_reference_tables() -> None:
    measured = tables(
        "| run | MiB |\n|---|---|\n| a | 204 → 286 |\n| b | 1.071 |\n| c | 4,561 |\n"
        "\n| message | µs |\n|---|---|\n| request | 8 µs |\n| batch | 24 µs |\n"
    )
    reference = tables(
        "| offset | bytes |\n|---|---|\n| 0 | 4 |\n| 16 + n | pad |\n"
        "\n| variable | default |\n|---|---|\n| `X_MS` | `0.5` |\n| `Y` | `1,000 ms` |\n"
        "\n| endpoint | what |\n|---|---|\n| `GET /openapi.json` | the OpenAPI 3.1 document |\n"
        "\n```\n| in | code |\n|---|---|\n| 1.5 | 2.5 |\n```\n"
    )
    assert [t.measured for t in measured] == [True, True]
    assert [t.measured for t in reference] == [False, False, False]


def test_checker_catches_missing_and_bad_provenance(tmp_path: Path) -> None:
    """The checker itself: no line, a malformed line, a missing JSON, figures without their JSON,
    an unknown commit."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "ok.json").write_text("{}", encoding="utf-8")
    table = "| a | b |\n|---|---|\n| x | 0.5 |\n| y | 0.7 |\n"
    page = tmp_path / "probe.md"
    page.write_text(
        f"# Probe\n\nNo provenance:\n\n{table}\n"
        f"Measured at abc1234 (2026-12-01)\n\n{table}\n"
        f"Measured at abc1234 (2026-12-01); JSON: [x](results/gone.json)\n\n{table}\n"
        f"Measured at abc1234 (2026-12-01); JSON: [x](results/ok.json)\n\n{table}\n"
        f"Measured at abc1234 … def5678 (2026-12-01 … 2026-12-02), rows; JSON: [x](results/ok.json)"
        f"\n\n{table}\n"
        f"Measured at abc1234 (2026-12-01); JSON: not kept (lost)\n\n{table}\n"
        f"Measured at abc1234 (2026-12-01), a row not kept; JSON: [x](results/ok.json)\n\n{table}",
        encoding="utf-8",
    )
    problems = provenance_problems(page, check_git=False)
    assert len(problems) == 5, problems
    assert "no 'Measured at' line" in problems[0]
    assert "not of the form" in problems[1]
    assert "results/gone.json does not exist" in problems[2]
    assert "not of the form" in problems[3]
    assert "JSON was not kept" in problems[4]
    if not _git_history():
        pytest.skip("not a full git checkout: the commit checks are not exercised")
    ok = "JSON: [x](results/ok.json)"
    assert line_problems(
        f"Measured at 0000000deadbeef (2026-12-01); {ok}", page, check_git=True
    ) == ["commit 0000000deadbeef is not in the git history"]
    head = _git("rev-parse", "--short=12", "HEAD")
    made = _commit_date(head)
    early = made - dt.timedelta(days=1)
    assert line_problems(f"Measured at {head} ({made}); {ok}", page, check_git=True) == []
    assert line_problems(f"Measured at {head} ({early}); {ok}", page, check_git=True) == [
        f"{early} is before {head}'s date {made}"
    ]
