"""HyperParallel census of a layer kind: the spec, the file, and where its numbers go."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ndcost import Model
from ndcost.kernels.columns import HYPER_POLICY_MASK, KIND, MEMORY_KIND
from ndcost.spec.census import KindCensus, read_census
from ndcost.errors import SpecError
from ndcost.tables.memory import memory_kind_table
from ndcost.tables.nd_tables import nd_kind_table
from ndcost.spec.recompute_spec import selective_keep_mask

CENSUS = {
    "source": "synthetic census for tests",
    "kinds": {
        "dense": {"selective_attention_mm": 0.5, "selective_ffn_mm": 0.25, "saved": 1000.0, "saved_tp": 3000.0,
                  "selective": 400.0, "selective_tp": 800.0},
        "moe": {"selective_attention_mm": 0.75, "selective_ffn_mm": 0.0},
    },
}


def test_policy_mask_is_the_hyperparallel_rule():
    # attBMM and attUp kept, every other switch recomputed, whatever the flags.
    for fa in (False, True):
        for sp in (1, 2):
            for comm in (False, True):
                mask = selective_keep_mask("hyperparallel", flash_attention=fa, sequence_parallel_degree=sp,
                                           comm_recompute=comm)
                assert mask == HYPER_POLICY_MASK == 0b1000_0001


def test_read_census_from_mapping_and_file(tmp_path):
    entries = read_census(CENSUS)
    assert [e.kind for e in entries] == ["dense", "moe"]
    assert entries[0].saved_tp == 3000.0 and entries[1].saved is None
    path = tmp_path / "census.json"
    path.write_text(json.dumps(CENSUS))
    assert read_census(path) == entries
    assert read_census(str(path)) == entries


@pytest.mark.parametrize("entry, parameter", [
    ({"selective_attention_mm": 1.5, "selective_ffn_mm": 0.0}, "selective_attention_mm"),
    ({"selective_attention_mm": 0.5, "selective_ffn_mm": -0.1}, "selective_ffn_mm"),
    ({"selective_attention_mm": 0.5, "selective_ffn_mm": True}, "selective_ffn_mm"),
    ({"selective_attention_mm": 0.5, "selective_ffn_mm": 0.5, "saved": 1.0}, "saved_tp"),
    ({"selective_attention_mm": 0.5, "selective_ffn_mm": 0.5, "saved": -1.0, "saved_tp": 1.0}, "saved"),
    ({"selective_attention_mm": 0.5, "selective_ffn_mm": 0.5, "selective": float("nan"),
      "selective_tp": 1.0}, "selective"),
    ({"selective_attention_mm": 0.5}, "selective_ffn_mm"),
    ({"selective_attention_mm": 0.5, "selective_ffn_mm": 0.5, "kept": 1.0}, "kept"),
])
def test_bad_census_names_the_field(entry, parameter):
    with pytest.raises(SpecError, match=f"'{parameter}' parameter"):
        read_census({"kinds": {"dense": entry}})


def test_bad_census_files(tmp_path):
    with pytest.raises(SpecError, match=r"name an existing file \(a census JSON\)"):
        read_census(tmp_path / "missing.json")
    with pytest.raises(SpecError, match="not a directory"):
        read_census(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(SpecError, match="valid JSON"):
        read_census(bad)
    with pytest.raises(SpecError, match="'kinds' parameter"):
        read_census({"kinds": {}})


def test_model_census_names_its_kinds():
    m = Model.from_catalog("deepseek-v3").with_census(CENSUS)
    assert m.kind_census("dense").selective_ffn_mm == 0.25 and m.kind_census("vision") is None
    assert Model.from_dict(m.to_dict()) == m and hash(m) == hash(Model.from_dict(m.to_dict()))
    with pytest.raises(SpecError, match=r"'census' parameter of Model must name layer kinds of the model \(dense\)"):
        Model.from_catalog("llama3-8b").with_census({"kinds": {"moe": {"selective_attention_mm": 0.1,
                                                                         "selective_ffn_mm": 0.1}}})
    twice = (KindCensus("dense", 0.1, 0.1), KindCensus("dense", 0.2, 0.2))
    with pytest.raises(SpecError, match="hold one census a kind"):
        Model.from_catalog("llama3-8b").with_census(twice)


def test_census_reaches_the_kernel_tables():
    plain = Model.from_catalog("deepseek-v3")
    m = plain.with_census(CENSUS)
    nd, mem = nd_kind_table(m), memory_kind_table(m)
    names = [k.name for k in m.kinds]
    dense, moe = names.index("dense"), names.index("moe")
    assert (nd[dense, KIND["census_att"]], nd[dense, KIND["census_ffn"]]) == (0.5, 0.25)
    assert (nd[moe, KIND["census_att"]], nd[moe, KIND["census_ffn"]]) == (0.75, 0.0)
    assert mem[dense, MEMORY_KIND["census_saved"]] == 1000.0 and mem[dense, MEMORY_KIND["census_sel_tp"]] == 800.0
    assert mem[moe, MEMORY_KIND["census_saved"]] == -1.0            # no bytes stated: the formulas
    # Without a census every census column is -1, and nothing else differs.
    base_nd, base_mem = nd_kind_table(plain), memory_kind_table(plain)
    assert np.all(base_nd[:, KIND["census_att"]] == -1.0)
    census_columns = [KIND["census_att"], KIND["census_ffn"]]
    others = [i for i in range(nd.shape[1]) if i not in census_columns]
    np.testing.assert_array_equal(nd[:, others], base_nd[:, others])
    mem_census = [MEMORY_KIND[n] for n in ("census_saved", "census_saved_tp", "census_sel", "census_sel_tp")]
    mem_others = [i for i in range(mem.shape[1]) if i not in mem_census]
    np.testing.assert_array_equal(mem[:, mem_others], base_mem[:, mem_others])
