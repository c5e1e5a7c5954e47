"""What a release is made of agrees with itself (docs/RELEASING.md): one version, a changelog in Keep a
Changelog's form that has an entry for it, the documents the README links, and the Pythons that
cibuildwheel builds for, the classifiers claim and requires-python admits.

The slow tests (tests/test_wheels.py) build, check, upload and install the release; these run in the
README's test command, in a second or two.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ndcost

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
#: A checkout, not an extracted sdist (which carries neither the documents nor .ci/): tests/test_ci_script.py's test.
SOURCE_TREE = (ROOT / ".ci" / "run").exists()
needs_source_tree = pytest.mark.skipif(not SOURCE_TREE, reason="a source tree without .ci/ (an sdist)")

SEMVER = r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
#: Keep a Changelog 1.1.0's kinds of change, in its order.
CHANGE_KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
DOCUMENTS = ("CHANGELOG.md", "docs/RELEASING.md", "docs/INSTALL.md", "CONTRIBUTING.md")


def _version_file() -> str:
    tree = ast.parse((ROOT / "src" / "ndcost" / "_version.py").read_text(encoding="utf-8"))
    (assignment,) = [node for node in tree.body if isinstance(node, ast.Assign)]
    assert [target.id for target in assignment.targets] == ["__version__"]
    return ast.literal_eval(assignment.value)


def test_the_version_is_stated_in_one_place():
    assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "ndcost._version.__version__"}
    assert re.fullmatch(SEMVER, _version_file())
    assert ndcost.__version__ == _version_file()


def _changelog_sections(text: str) -> list[tuple[str, str | None, list[str]]]:
    """(version or "Unreleased", date, the ### headings under it), in file order."""
    sections = []
    for block in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = block.partition("\n")
        match = re.fullmatch(rf"\[(Unreleased|{SEMVER})\](?: - (\d{{4}}-\d{{2}}-\d{{2}}))?", heading.strip())
        assert match, f"a release heading is '## [X.Y.Z] - YYYY-MM-DD' or '## [Unreleased]': {heading!r}"
        kinds = re.findall(r"^### (.+)$", body, flags=re.MULTILINE)
        sections.append((match.group(1), match.group(5), kinds))
    return sections


@needs_source_tree
def test_the_changelog_keeps_a_changelog_and_has_this_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n")
    assert "keepachangelog.com/en/1.1.0" in text and "semver.org" in text
    sections = _changelog_sections(text)
    assert sections[0][0] == "Unreleased" and sections[0][1] is None, "Unreleased comes first, undated"
    released = sections[1:]
    assert all(date is not None for _, date, _ in released), "every release is dated"
    versions = [tuple(int(part) for part in version.split(".")) for version, _, _ in released]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), "newest first"
    assert [date for _, date, _ in released] == sorted((date for _, date, _ in released), reverse=True)
    assert ndcost.__version__ in [version for version, _, _ in released], "the package's version has its entry"
    for version, _, kinds in sections:
        assert [kind for kind in kinds if kind not in CHANGE_KINDS] == [], version
        assert kinds == [kind for kind in CHANGE_KINDS if kind in kinds], f"{version}: in Keep a Changelog's order"


def test_a_changelog_heading_out_of_form_is_found():
    with pytest.raises(AssertionError, match="release heading"):
        _changelog_sections("# Changelog\n\n## 0.2.0 (2026-12-05)\n")


@needs_source_tree
def test_the_readme_links_the_release_and_contributor_documents():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for document in DOCUMENTS:
        assert f"]({document})" in readme, f"README.md links {document}"
        assert (ROOT / document).is_file(), document


def _requires_python_minimum() -> tuple[int, int]:
    match = re.fullmatch(r">=\s*3\.(\d+)", PROJECT["requires-python"].strip())
    assert match, f"requires-python is a lower bound only: {PROJECT['requires-python']!r}"
    return 3, int(match.group(1))


def _classifier_pythons() -> set[tuple[int, int]]:
    found = {re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c) for c in PROJECT["classifiers"]}
    return {(3, int(match.group(1))) for match in found if match}


def _build_identifiers() -> list[str]:
    """`cibuildwheel --print-build-identifiers --platform linux` on this pyproject.toml, with no CIBW_*
    variable of this process changing the selection."""
    executable = shutil.which("cibuildwheel", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if executable is None:
        pytest.skip("cibuildwheel is not installed (the test extra installs it on Python 3.11 and later)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    proc = subprocess.run([executable, "--print-build-identifiers", "--platform", "linux"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.split()


def test_cibuildwheel_builds_every_python_the_classifiers_claim():
    identifiers = _build_identifiers()
    assert identifiers, "cibuildwheel selects nothing to build"
    pythons = set()
    for identifier in identifiers:
        match = re.fullmatch(r"cp3(\d+)-manylinux_(x86_64|aarch64)", identifier)
        assert match, f"{identifier}: CPython on manylinux only (PyPy and musllinux are skipped)"
        pythons.add((3, int(match.group(1))))
    assert pythons == _classifier_pythons()
    assert min(pythons) == _requires_python_minimum(), "requires-python admits exactly the oldest built Python"
    architectures = {identifier.split("-manylinux_")[1] for identifier in identifiers}
    assert len(identifiers) == len(pythons) * len(architectures), "one wheel per Python and architecture"


def test_this_interpreter_is_one_the_package_claims():
    assert sys.version_info[:2] in _classifier_pythons() and sys.version_info[:2] >= _requires_python_minimum()
