"""The CLI explains itself: every flag's help states its default (or that it is required), the
commands' worked examples run, and a mistyped name is answered with the nearest valid one."""
from __future__ import annotations

import argparse
import shlex

import pytest

from ndcost.cli.main import build_parser, main
from ndcost.cli.help import ESTIMATE_EXAMPLES, SEARCH_EXAMPLES, STRATEGY_HELP
from ndcost.suggest import closest_name


def _actions(parser: argparse.ArgumentParser, path: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{path} {name}".strip())
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield path, action


def test_every_flag_states_its_default_or_that_it_is_required():
    missing = []
    for path, action in _actions(build_parser()):
        text = (action.help or "").lower()
        if not action.option_strings:          # a positional: its help says what it is
            ok = bool(text)
        else:
            ok = "default" in text or "required" in text
        if not ok:
            missing.append(f"{path} {'/'.join(action.option_strings)}: {action.help!r}")
    assert not missing, "\n".join(missing)


def test_strategy_help_names_each_default():
    assert all("default" in text for text in STRATEGY_HELP.values())


@pytest.mark.parametrize("command", ESTIMATE_EXAMPLES + SEARCH_EXAMPLES)
def test_the_help_examples_run(command, capsys):
    words = shlex.split(command)
    assert words[0] == "ndcost"
    assert main(words[1:] + (["--no-progress"] if words[1] == "search" else [])) == 0
    assert capsys.readouterr().out


def test_estimate_help_shows_its_examples(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and ESTIMATE_EXAMPLES[0][:40] in out.replace("\n", " ")
    assert "(default 1)" in out and "(default 4096)" in out


@pytest.mark.parametrize("typed, meant", [("deepsek-v3", "deepseek-v3"), ("lama3-70b", "llama3-70b"),
                                          ("qwen3-9b", "qwen3-8b"), ("gpt-oss-12b", "gpt-oss-120b")])
def test_a_mistyped_model_gets_the_nearest_name(typed, meant, capsys):
    assert main(["show", typed]) == 2
    err = capsys.readouterr().err
    assert f"did you mean '{meant}'?" in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("typed, meant", [("h100sxm", "h100-sxm"), ("b-200", "b200"), ("h20", "h200")])
def test_a_mistyped_device_gets_the_nearest_name(typed, meant, capsys):
    args = ["estimate", "llama3-8b", "--device", typed, "--dp", "8", "--global-batch-size", "64"]
    assert main(args) == 2
    assert f"did you mean '{meant}'?" in capsys.readouterr().err


def test_device_names_are_case_insensitive_and_h100_is_an_alias():
    for typed in ("H200", "h100"):
        assert main(["estimate", "llama3-8b", "--device", typed, "--dp", "8", "--global-batch-size", "64"]) == 0


def test_a_mistyped_software_preset_gets_the_nearest_name(capsys):
    args = ["estimate", "llama3-8b", "--device", "h100-sxm", "--dp", "8", "--global-batch-size", "64",
            "--software", "torchtitan_compile"]
    assert main(args) == 2
    assert "did you mean 'torchtitan-compile'?" in capsys.readouterr().err


def test_nothing_close_suggests_nothing():
    assert closest_name("zzzz", ["llama3-8b", "deepseek-v3"]) is None
    assert closest_name(42, ["llama3-8b"]) is None
