"""Checks the sourced facts files share (data/validation/*_run_facts.yaml): every fact a {value, ...}
mapping with a source pinned to a full commit, or a null value with a note saying where it was
looked for; YAML merge lists that combine disjoint mappings only."""
from __future__ import annotations

import re

import yaml

BASES = {"stated", "preset", "code_default", "derived", "inferred"}
# A source naming a repository revision must pin it to a full commit.
PINNED = re.compile(r"\b[\w.-]+/[\w.-]+@([0-9a-f]*)")


def fact_problems(where: str, name: str, fact) -> list[str]:
    """What is wrong with one fact entry (empty when nothing)."""
    if not isinstance(fact, dict) or "value" not in fact:
        return [f"{where}.{name}: not a {{value, ...}} mapping"]
    problems = []
    if fact["value"] is None:
        if not str(fact.get("note") or "").strip():
            problems.append(f"{where}.{name}: null value without a note saying where it was looked for")
        return problems
    source = str(fact.get("source") or "").strip()
    if not source and fact.get("basis") != "inferred":
        problems.append(f"{where}.{name}: value without a source")
    if not source and not str(fact.get("note") or "").strip():
        problems.append(f"{where}.{name}: inferred value without the reasoning in a note")
    for commit in PINNED.findall(source):
        if len(commit) != 40:
            problems.append(f"{where}.{name}: source pins '{commit}', not a 40-hex commit")
    if "basis" in fact and fact["basis"] not in BASES:
        problems.append(f"{where}.{name}: unknown basis {fact['basis']!r}")
    return problems


def merge_lists(node, found: list) -> list:
    """Every `<<: [a, b, ...]` in a composed YAML tree."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == "<<" and isinstance(value, yaml.SequenceNode):
                found.append(value)
            merge_lists(value, found)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            merge_lists(item, found)
    return found


def overlapping_merges(text: str) -> list[int]:
    """Lines of merge lists whose mappings share a key (PyYAML releases disagree on which one wins:
    6.0.3 and 6.0.4 resolve it in opposite orders)."""
    lines = []
    for sequence in merge_lists(yaml.compose(text), []):
        keys = [key.value for mapping in sequence.value for key, _ in mapping.value]
        if len(keys) != len(set(keys)):
            lines.append(sequence.start_mark.line + 1)
    return lines
