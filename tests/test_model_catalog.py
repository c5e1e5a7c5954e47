"""The built-in model catalog: names, files, and parameter counts against the
authors' published figures (catalog_facts/models.yaml, copied into each file's
``published`` block)."""
from __future__ import annotations

import re

import pytest

import ndcost.spec.model_catalog as catalog
from ndcost.errors import SpecError
from ndcost.spec.model import Model
from ndcost.spec.model_catalog import catalog_entry, load_model, models

CATALOG = [
    "deepseek-v2-lite",
    "deepseek-v3",
    "gemma3-27b",
    "gpt-oss-120b",
    "gpt3-175b",
    "kimi-k2",
    "llama3-70b",
    "llama3-8b",
    "llama3.1-405b",
    "llama4-maverick",
    "mixtral-8x7b",
    "nemotron-h-56b",
    "qwen2.5-72b",
    "qwen2.5-vl-7b",
    "qwen3-235b-a22b",
    "qwen3-30b-a3b",
    "qwen3-32b",
    "qwen3-8b",
    "qwen3-next-80b-a3b",
]

# Published "activated" figures an honest count cannot match within 1%. Each is
# stated to a coarse last digit and the authors evidently truncate rather than
# round, so the test instead checks that the count lies in
# [published, published + one unit of the last stated digit).
#   deepseek-v3 "37B": our count is 37.55B (non-expert 2.8B incl. embedding and
#     head 1.85B, + 8 of 256 routed experts and the shared expert on 58 MoE
#     layers). Dropping the input embedding (a lookup, no FLOPs) would give
#     36.63B; the definition used here counts every non-expert parameter.
#   qwen3-30b-a3b "3.3B": our count is 3.353B; without the embedding and head
#     it would be 2.73B, so Qwen's figure includes them and truncates 3.35.
#   qwen3-next-80b-a3b "3B": our count is 3.87B (3.25B without embedding and
#     head); "3B" is the name's nominal A3B, one significant digit.
#   deepseek-v2-lite "2.4B": 2.451B without the input embedding (its card's convention, stated in its
#     file), so "2.4B" truncates 2.45.
#   llama4-maverick "17B": 17.18B with the embeddings (Meta's card states no convention).
TRUNCATED_ACTIVE = {
    "deepseek-v2-lite": 0.1e9,
    "llama4-maverick": 1e9,
    "deepseek-v3": 1e9,
    "qwen3-30b-a3b": 0.1e9,
    "qwen3-next-80b-a3b": 1e9,
}


# Published totals stated to fewer digits than 1% needs: the allowed distance, the stated rounding.
#   kimi-k2 "1 trillion": the config's count is 1.026T.
ROUNDED_TOTAL = {"kimi-k2": 0.05e12}

# Catalog models catalog_facts/models.yaml does not list (it has no vision-language model, nor the
# families added after it: gpt-oss, Gemma 3, Kimi K2, DeepSeek-V2).
OUTSIDE_FACTS = ("deepseek-v2-lite", "gemma3-27b", "gpt-oss-120b", "kimi-k2", "llama4-maverick", "nemotron-h-56b",
                 "qwen2.5-vl-7b")


def test_models_lists_the_catalog_sorted():
    assert models() == CATALOG
    assert models() == sorted(models())


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_files_have_source_config_and_published(name):
    entry = catalog_entry(name)
    assert set(entry) == {"source", "config", "published"}
    if name in OUTSIDE_FACTS:
        # Sourced in the file itself: a config_source, and published figures with their citations.
        assert entry["source"]["facts"].startswith("outside catalog_facts/models.yaml")
        assert entry["source"]["config_source"] and ("arXiv" in entry["published"]["source"]
                                                      or "MODEL_CARD" in entry["published"]["source"])
    else:
        assert entry["source"]["facts"].startswith("catalog_facts/models.yaml")
        assert entry["published"]["source"].startswith("catalog_facts/models.yaml")
    assert isinstance(entry["published"]["total"], int)
    m = load_model(name)
    assert isinstance(m, Model) and m.name == name


@pytest.mark.parametrize("name", CATALOG)
def test_total_parameters_match_published_within_one_percent(name):
    published = catalog_entry(name)["published"]["total"]
    total = load_model(name).parameter_count().total
    if name in ROUNDED_TOTAL:
        assert abs(total - published) <= ROUNDED_TOTAL[name]
        assert total != pytest.approx(published, rel=0.01)  # keep the exception honest
    else:
        assert total == pytest.approx(published, rel=0.01)


@pytest.mark.parametrize("name", CATALOG)
def test_active_parameters_match_published(name):
    model = load_model(name)
    published = catalog_entry(name)["published"]
    active = model.parameter_count().active
    if published.get("active_excludes_input_embedding"):
        # the card counts without the input embedding (a lookup): its file says so and why
        active -= model.embedding_parameters()
    if published["active"] is None:
        # dense: the source states no activated figure; every parameter is active
        assert not model.is_moe
        assert active == model.parameter_count().total
        assert active == pytest.approx(published["total"], rel=0.01)
    elif name in TRUNCATED_ACTIVE:
        assert published["active"] <= active < published["active"] + TRUNCATED_ACTIVE[name]
        assert active != pytest.approx(published["active"], rel=0.01)  # keep the exception honest
    else:
        assert active == pytest.approx(published["active"], rel=0.01)


@pytest.mark.parametrize("name", ["gemma3-27b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b"])
def test_non_embedding_parameters_match_published(name):
    model = load_model(name)
    published = catalog_entry(name)["published"]["non_embedding"]
    non_embedding = model.parameter_count().total - model.embedding_parameters() - model.output_parameters()
    assert non_embedding == pytest.approx(published, rel=0.01)


def test_deepseek_v3_total_excludes_mtp_and_mtp_module_is_14b():
    m = load_model("deepseek-v3")
    published = catalog_entry("deepseek-v3")["published"]
    assert m.parameter_count().total == pytest.approx(671e9, rel=0.001)
    # The README's 14B MTP module is counted as stored in the checkpoint: its
    # transformer layer, eh_proj and norms, and its copies of the embedding and
    # output head (shared with the main model in training): 13.46B, and
    # 671.03B + 13.46B = 684.49B against the stated 685B checkpoint.
    mtp_module = m.mtp_layer_parameters() + m.mtp_extra_parameters(include_shared_copies=True)
    assert mtp_module == pytest.approx(14e9, rel=0.05)
    assert m.parameter_count().total + mtp_module == pytest.approx(published["checkpoint_total"], rel=0.01)
    # without the shared copies: the layer (11.51B) + eh_proj and three norms (0.10B)
    assert m.mtp_extra_parameters() == 2 * 7168 * 7168 + 3 * 7168
    with_mtp = m.parameter_count(include_mtp=True)
    assert with_mtp.total == m.parameter_count().total + m.mtp_layer_parameters() + m.mtp_extra_parameters()


def test_llama_405b_uses_eight_kv_heads():
    # catalog_facts conflict note: the paper, Meta's sku_list and later HF snapshots say 8
    assert load_model("llama3.1-405b").num_key_value_heads == 8


def test_from_catalog_shares_one_frozen_instance():
    assert Model.from_catalog("llama3-8b") is load_model("llama3-8b")


def test_catalog_entry_is_a_copy():
    entry = catalog_entry("llama3-8b")
    entry["config"]["hidden_size"] = 1
    assert catalog_entry("llama3-8b")["config"]["hidden_size"] == 4096


def test_unknown_name_lists_known_names():
    rule = f"be one of {', '.join(map(repr, CATALOG))}"
    message = "^" + re.escape(f"The 'name' parameter of the model catalog must {rule}. Got 'llama-9000' instead.") + "$"
    with pytest.raises(SpecError, match=message):
        load_model("llama-9000")
    with pytest.raises(SpecError, match=message):
        Model.from_catalog("llama-9000")
    with pytest.raises(SpecError, match=re.escape("Got ['llama3-8b'] instead.")):
        catalog.load_model(["llama3-8b"])
