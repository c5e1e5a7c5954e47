"""The catalog answers to the spellings people use: versions with or without the dot, Hugging Face repository
ids, the model's published name; an ambiguous spelling names nothing."""
from __future__ import annotations

import pytest

import ndcost
from ndcost.cli.main import main
from ndcost.spec.model_catalog import EXTRA_ALIASES, catalog_name, model_aliases, models


@pytest.mark.parametrize("typed, name", [
    ("llama3.1-70b", "llama3-70b"), ("llama3.1-8b", "llama3-8b"), ("llama-3.1-405b", "llama3.1-405b"),
    ("Llama-3.1-70B", "llama3-70b"), ("meta-llama/Llama-3.1-70B", "llama3-70b"),
    ("meta-llama/Meta-Llama-3.1-405B", "llama3.1-405b"), ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"),
    ("deepseek-ai/DeepSeek-V3", "deepseek-v3"), ("moonshotai/Kimi-K2-Instruct", "kimi-k2"),
    ("openai/gpt-oss-120b", "gpt-oss-120b"), ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"), ("QWEN3_8B", "qwen3-8b"),
])
def test_common_spellings_name_the_catalog_model(typed, name):
    assert catalog_name(typed) == name
    assert ndcost.Model.from_catalog(typed).name == name


def test_every_catalog_model_has_its_published_name_and_repository_as_aliases():
    from ndcost.spec.model_catalog import catalog_entry

    for name in models():
        source = catalog_entry(name)["source"]
        for text in (source.get("name"), source.get("hf_repo")):
            if text:
                assert catalog_name(text) == name, (name, text)
    assert all(catalog_name(text) == name for text, name in EXTRA_ALIASES.items())
    assert all(target in models() for target in model_aliases().values())


def test_the_command_line_takes_an_alias(capsys):
    assert main(["estimate", "llama3.1-70b", "--device", "h100-sxm", "--dp", "8", "--tp", "8",
                 "--global-batch-size", "64", "--seq-length", "8192"]) == 0
    assert capsys.readouterr().out.startswith("llama3-70b on 64 x h100-sxm")
    assert main(["show", "Qwen/Qwen3-235B-A22B"]) == 0


def test_what_no_spelling_names_is_refused_with_the_nearest_name(capsys):
    assert catalog_name("llama3-7b") is None and catalog_name(42) is None
    assert main(["show", "llama3-7b"]) == 2
    assert "did you mean" in capsys.readouterr().err
