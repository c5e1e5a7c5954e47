"""Write docs/STACKS.md from the preset tables (``ndcost software`` prints the same rows).

Run after changing a preset (ndcost.spec.software_fields, ndcost.spec.software_rates, ndcost.spec.nvidia_recipes):
``python tools/gen_stacks_doc.py``. tests/test_software_command.py fails when the file is stale.
"""
from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "STACKS.md"


def main() -> None:
    from ndcost.cli.software import stacks_markdown

    DOC.write_text(stacks_markdown() + "\n", encoding="utf-8")
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
