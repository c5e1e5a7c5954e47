"""What the CLI tests share: a command refused as bad input."""
from __future__ import annotations

from ndcost.cli.main import main


def refused(capsys, argv, *expected) -> str:
    """Run *argv*: exit 2, one line on stderr naming each of *expected*, never a traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in err, err
    return err
