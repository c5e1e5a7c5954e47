"""Every document the code cites is in the repository, and every section of docs/ND_MODEL.md it cites
exists (issue 26: "a codebase that explains itself").

The repository's text files -- the package, the Cython sources, the tests, tools, benchmarks, docs
and the top-level files -- are read as they are on disk (an sdist has no git).
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ND_MODEL = ROOT / "docs" / "ND_MODEL.md"
#: Where the repository's own text lives; generated C and build output are not read.
_TREES = ("src", "cysrc", "tests", "tools", "bench", "docs", ".ci")
_TOP = ("README.md", "CHANGELOG.md", "CONTRIBUTING.md", "setup.py", "pyproject.toml", "MANIFEST.in")
_SUFFIXES = {".py", ".pyx", ".pxi", ".pyi", ".md", ".toml", ".json", ".yaml", ".yml", ".txt", ".cfg", ".in", ""}
_SKIPPED_DIRS = {"__pycache__", "build", ".venv", "ndcost.egg-info"}
#: This file names what it forbids.
_SELF = Path(__file__).resolve()

#: A citation of the ND model: the old external name or the page, then one or more section numbers
#: ("ND_REFERENCE §2.5-§2.6", "docs/ND_MODEL.md §3.7 and §8.6").
_ND_CITATION = re.compile(
    r"(?:ND_REFERENCE(?:\.md)?|(?:docs/)?ND_MODEL\.md)((?:(?:[\s,;(]|and|or|to|-|–)*§\d+(?:\.\d+)*)+)")
_SECTION_HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)[ .]", re.MULTILINE)
#: A document named as if it were the repository's, whose pages have upper-case names: a bare name
#: (STYLE.md, DESIGN.md, ARCHITECTURE.md) or one under docs/ or ../shared/. Another repository's file
#: cited as a source has a lower-case name or another folder (Megatron-Bridge's docs/float8.md,
#: stas00/ml-engineering's compute/accelerator/README.md).
_DOCUMENT = re.compile(r"(?<![\w/.-])((?:\.\./shared/|docs/)?[A-Z][A-Z0-9_]*\.md)\b")


def _text_files():
    for name in _TOP:
        path = ROOT / name
        if path.is_file():
            yield path
    for tree in _TREES:
        base = ROOT / tree
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if (path.is_file() and path.suffix in _SUFFIXES and path.resolve() != _SELF
                    and not _SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts)):
                yield path


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def _sections() -> set[str]:
    return set(_SECTION_HEADING.findall(ND_MODEL.read_text(encoding="utf-8")))


def test_nd_model_has_every_section_the_code_cites():
    """Each section number cited as ND_REFERENCE §x (today) or docs/ND_MODEL.md §x (after the rewrite)
    is a heading of docs/ND_MODEL.md, so the rewrite keeps every citation pointing at its text."""
    sections = _sections()
    assert {"1.6", "2.3", "3.7", "8.2"} <= sections
    missing = {}
    for path in _text_files():
        for match in _ND_CITATION.finditer(_read(path)):
            for number in re.findall(r"§(\d+(?:\.\d+)*)", match.group(1)):
                if number not in sections:
                    missing.setdefault(number, []).append(str(path.relative_to(ROOT)))
    assert not missing, f"docs/ND_MODEL.md has no section for: {missing}"


def test_nd_differences_lists_each_deliberate_difference_with_its_effect():
    text = (ROOT / "docs" / "ND_DIFFERENCES.md").read_text(encoding="utf-8")
    for topic in ("remainder", "zero_bubble_v", "empty", "moe_dispatch_count", "sp", "bubble", "memory model"):
        assert topic in text, topic
    assert "effect" in text and "Seconds mode" in text


def test_no_citation_of_a_document_outside_the_repository():
    """No comment, docstring or document cites a document the repository does not hold.

    Today the code cites the ND reference map outside the repository (ND_REFERENCE §x.y) and the
    shared STYLE.md and DESIGN.md. Once the other branches of issue 26 have landed, the lead runs,
    at the repository root::

        git grep -lE 'ND_REFERENCE(\\.md)? §' -- . ':!tests/test_citations.py' \\
          | xargs sed -i -E 's/ND_REFERENCE(\\.md)? §/docs\\/ND_MODEL.md §/g'

    (the section numbers are kept: test_nd_model_has_every_section_the_code_cites checks each has
    its section), points the STYLE.md / DESIGN.md citations at the repository's own pages, rebuilds
    (the .pxi comments change), and removes the skip mark above.
    """
    offending = []
    for path in _text_files():
        text = _read(path)
        relative = path.relative_to(ROOT)
        for line_number, line in enumerate(text.splitlines(), 1):
            if "ND_REFERENCE" in line:
                offending.append(f"{relative}:{line_number}: ND_REFERENCE")
            for document in _DOCUMENT.findall(line):
                if not _in_repository(document, path):
                    offending.append(f"{relative}:{line_number}: {document}")
    assert not offending, "citations of documents not in the repository:\n" + "\n".join(offending)


def _in_repository(document: str, cited_from: Path) -> bool:
    """Whether *document* names a file of this repository: a path from the root or from the citing
    file's folder, or a bare name at the root or in docs/."""
    if document.startswith("../shared/"):
        return False
    candidates = [ROOT / document, cited_from.parent / document]
    if "/" not in document:
        candidates.append(ROOT / "docs" / document)
    return any(candidate.resolve().is_file() and ROOT in candidate.resolve().parents for candidate in candidates)
