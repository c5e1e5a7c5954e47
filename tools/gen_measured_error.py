"""Write src/ndcost/data/validation/measured_error.yaml: every scored row of the shipped validation files.

Run after anything that moves a validation row (a rate, a formula, a row or its facts):
``python tools/gen_measured_error.py``. tests/test_measured_error.py fails when the file and a fresh
``ndcost validate --builtin`` disagree.
"""
from __future__ import annotations

from pathlib import Path


def render() -> str:
    import yaml

    from ndcost.io.measured_error import error_rows, table_document
    from ndcost.io.validation import BUILTIN_RUNS, validate_runs

    reports = {name: validate_runs(path) for name, path in BUILTIN_RUNS.items()}
    skipped = {row.id: row.skipped for report in reports.values() for row in report.rows if row.skipped}
    return yaml.safe_dump(table_document(error_rows(reports), skipped), sort_keys=False, width=120, default_flow_style=None)


def main() -> None:
    from ndcost.io.measured_error import ERROR_TABLE

    Path(ERROR_TABLE).write_text(render(), encoding="utf-8")
    print(f"wrote {ERROR_TABLE}")


if __name__ == "__main__":
    main()
