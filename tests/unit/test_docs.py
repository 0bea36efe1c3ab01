"""The front door (issue 25 item 8): a short README, and Markdown links that lead somewhere.

Checks README.md's length, and every relative link in README.md, CHANGELOG.md and docs/*.md:
the target exists inside the repository, and an anchor into a Markdown file names one of its
headings (GitHub's slugs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250

#: [text](target) and ![alt](target); the target ends at whitespace or ")".
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks (code is not rendered as links)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, spaces to '-', punctuation dropped."""
    text = re.sub(r"`|\*\*|__", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def link_problems(page: Path, root: Path = ROOT) -> list[str]:
    """Every relative link of ``page`` that does not resolve inside ``root``, one line each."""
    problems = []
    for line in _prose(page.read_text(encoding="utf-8")):
        line = re.sub(r"`[^`]*`", "", line)  # inline code is not a link
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # http:, https:, mailto: ...
            where = f"{page.relative_to(root)}: {target}"
            file_part, _, anchor = target.partition("#")
            dest = page if not file_part else (page.parent / file_part).resolve()
            if not dest.is_relative_to(root.resolve()):
                problems.append(f"{where}: leaves the repository")
                continue
            if not dest.exists():
                problems.append(f"{where}: no such file")
                continue
            if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where}: no heading with anchor #{anchor}")
    return problems


def test_readme_is_short() -> None:
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES})"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert link_problems(page) == []


def test_readme_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [
        p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"docs/{p.name}" not in readme
    ]
    assert missing == [], f"docs pages not in the README's index: {missing}"


def test_checker_catches_broken_links(tmp_path: Path) -> None:
    """The checker itself: a missing file, a missing anchor and an escape are each reported."""
    (tmp_path / "README.md").write_text("# Front\n\n## The two commands\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "probe.md"
    page.write_text(
        "# Probe\n\n## A heading (with) `code`\n\n"
        "[ok](#a-heading-with-code) [ok](../README.md#the-two-commands)\n"
        "[gone](no-such-page.md) [anchor](#nowhere) [out](../../elsewhere/x.md)\n"
        "```\n[in code](not-a-link.md)\n```\n",
        encoding="utf-8",
    )
    problems = link_problems(page, tmp_path)
    assert len(problems) == 3, problems
    assert "no such file" in problems[0]
    assert "no heading with anchor #nowhere" in problems[1]
    assert "leaves the repository" in problems[2]


def test_slug_matches_github() -> None:
    assert (
        slug("Against a fair VM and tuned KD (issue 22)")
        == "against-a-fair-vm-and-tuned-kd-issue-22"
    )
    assert (
        slug("Running SOLARIS: `make demo` and `make test`")
        == "running-solaris-make-demo-and-make-test"
    )
    assert (
        slug("One tier definition for training and serving")
        == "one-tier-definition-for-training-and-serving"
    )
