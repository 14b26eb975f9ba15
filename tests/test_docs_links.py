"""Every relative link in README.md and docs/*.md points to a file that exists, and a `#heading` part to a
heading of that file (GitHub's anchor spelling), so a reader who follows the README never lands on nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation other than '-' and '_' dropped, spaces to '-'."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_the_readme_links_to_the_docs_pages_that_hold_its_measurements():
    targets = {t.split("#")[0] for t in links(ROOT / "README.md")}
    for page in ("docs/cpu_training.md", "docs/benchmarks.md", "docs/paper_notes.md", "docs/scaling.md",
                 "docs/rllib.md", "docs/gpu.md", "docs/environments.md", "docs/training.md"):
        assert page in targets, page


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: broken links {broken}"
