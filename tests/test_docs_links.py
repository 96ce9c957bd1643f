"""Every relative link in the README, the docs and the task and benchmark READMEs reaches a
file that exists and, where it names a section (``page.md#section``), a heading of that page,
under GitHub's rules for heading anchors: a renamed heading or a moved page breaks a test, not a reader."""

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("tasks/*/README.md")),
         *sorted(ROOT.glob("benchmarks/**/README.md"))]
FENCE = re.compile(r"```.*?```", re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of ``page``'s headings, a repeated one numbered as GitHub numbers it."""
    seen: Counter[str] = Counter()
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text(encoding="utf-8")), re.M):
        base = anchor(heading)
        found.add(f"{base}-{seen[base]}" if seen[base] else base)
        seen[base] += 1
    return found


def links(page: Path) -> list[str]:
    """``page``'s relative link targets outside code blocks (web and mail addresses left out)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


CASES = [pytest.param(page, target, id=f"{page.relative_to(ROOT)}->{target}")
         for page in PAGES for target in links(page)]


def test_the_pages_hold_links():
    assert len(CASES) >= 50  # the extraction finds what it should


def test_anchor_follows_githubs_rules():
    assert anchor("At a glance: ten people, six methods") == "at-a-glance-ten-people-six-methods"
    assert anchor("R2F's views (`--paraphraser self`)") == "r2fs-views---paraphraser-self"
    assert anchor("One target's evaluation on a real LM") == "one-targets-evaluation-on-a-real-lm"


@pytest.mark.parametrize(("page", "target"), CASES)
def test_a_link_reaches_its_page_and_section(page, target):
    path, _, section = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{target}: no such file"
    if section and dest.suffix == ".md":
        assert section in anchors(dest), f"{target}: no heading with that anchor in {dest.name}"
