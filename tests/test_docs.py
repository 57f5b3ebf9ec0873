"""The README and docs/ hold together: every relative link lands on a file (and a heading) that exists, every code
block is either run by tests/test_readme.py (```sh) or plainly shown, and the README stays a first screen."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 200
# ```sh is run by tests/test_readme.py; a block without a language is shown only (output, a command needing a key).
# Another shell spelling (```bash, ```console) would be neither run nor meant as output: refused here.
FENCE_LANGUAGES = {"", "sh", "toml", "json", "python", "text"}
FENCE = re.compile(r"^```(.*)$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> list[str]:
    """The page's lines outside code blocks, inline code removed (a `[x](y)` in backticks is not a link)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        heading = re.match(r"#{1,6} (.+)", line)
        if fenced or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    return [
        target
        for target in LINK.findall("\n".join(prose(page.read_text())))  # a link's text may wrap
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto: are not checked here
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_the_link_check_sees_a_broken_link(tmp_path: Path):
    """The check itself: a missing file and a missing heading are found, a good one and a web address pass."""
    (tmp_path / "other.md").write_text("# A page: with `code`, and more\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[a](other.md#a-page-with-code-and-more) [b](other.md#twice-1) [c](https://example.com/x)\n"
        "[d](missing.md) [e wrapped\nover lines](other.md#nowhere) `[f](ignored.md)`\n```\n[g](ignored-too.md)\n```\n"
    )
    assert relative_links(page) == [
        "other.md#a-page-with-code-and-more",
        "other.md#twice-1",
        "missing.md",
        "other.md#nowhere",
    ]
    assert {"a-page-with-code-and-more", "twice", "twice-1"} == anchors(tmp_path / "other.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_code_blocks_are_run_or_shown(page: Path):
    opening, languages = True, set()
    for line in page.read_text().splitlines():
        fence = FENCE.match(line)
        if fence:
            if opening:
                languages.add(fence.group(1).strip())
            opening = not opening
    assert opening, f"{page.name}: a code block is never closed"
    assert languages <= FENCE_LANGUAGES, f"{page.name}: {languages - FENCE_LANGUAGES} is neither run nor shown"


def test_the_readme_fits_a_first_screen():
    """The README says what stampede is and how to start; the reference lives in docs/ (issue 27)."""
    assert len((REPO / "README.md").read_text().splitlines()) <= README_MAX_LINES
