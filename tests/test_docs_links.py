"""Every relative link of the docs reaches a file, and every anchor a heading of it.

The docs point into each other and at the committed figures under
``benchmarks/results/``; a renamed file or heading breaks such a link without
any other test noticing. ``tests/<file>.py::<name>`` references must name a
test function or class that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
TEST_REF = re.compile(r"(tests/[\w/]+\.py)::(\w+)")


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of every heading of a Markdown file (outside fenced code blocks)."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def broken_links(doc: Path) -> list[str]:
    """``'line N: target (why)'`` for each relative link of ``doc`` that leads nowhere."""
    problems = []
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path_text, _, anchor = target.partition("#")
            path = (doc.parent / path_text).resolve() if path_text else doc
            if not path.exists():
                problems.append(f"line {number}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                problems.append(f"line {number}: {target} (no such heading)")
    return problems


def missing_tests(doc: Path) -> list[str]:
    """``'line N: tests/x.py::name'`` for each test reference whose file or function is gone."""
    problems = []
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        for file_text, name in TEST_REF.findall(line):
            path = ROOT / file_text
            source = path.read_text(encoding="utf-8") if path.exists() else ""
            if not re.search(rf"^\s*(?:def|class) {re.escape(name)}\b", source, re.M):
                problems.append(f"line {number}: {file_text}::{name}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_reaches_a_file_and_heading(doc: Path) -> None:
    assert broken_links(doc) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_named_test_exists(doc: Path) -> None:
    assert missing_tests(doc) == []


def test_the_checks_catch_a_broken_link_heading_and_test(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A heading\n", encoding="utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text("[ok](other.md#a-heading) [gone](missing.md) [bad](other.md#nope)\n"
                   "`tests/test_docs_links.py::no_such_test` `tests/test_docs_links.py::slug`\n",
                   encoding="utf-8")
    assert broken_links(doc) == ["line 1: missing.md (no such file)",
                                 "line 1: other.md#nope (no such heading)"]
    assert missing_tests(doc) == ["line 2: tests/test_docs_links.py::no_such_test"]
