"""Every ExecSpec and Rates field that a shipped validation row sets is reachable from the command line.

For each row of the shipped runs files (A100, H100) and of the memory facts, the row's spec, rates and
cluster are built as ``ndcost validate`` builds them; each field they hold otherwise than ExecSpec's
defaults and the device's rates is turned into the flag that states it (the stack table's, the strategy
flags', ``--software`` for what its stack fixes, ``--cluster`` for the part's figures), the flags are parsed
by ``ndcost estimate``'s own parser, and what it builds must be the row's: every field, to the bit.
"""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from ndcost.cli.args import strategy_from_args
from ndcost.cli.main import build_parser
from ndcost.files import read_mapping
from ndcost.io.validation import BUILTIN_RUNS, build_row
from ndcost.io.validation_memory import MEMORY_FACTS, build_memory_run
from ndcost.spec.exec_spec import ExecSpec
from ndcost.spec.model_catalog import models
from ndcost.spec.rates import SOFTWARE_PRESETS, Rates
from ndcost.spec.software_fields import software_fields
from ndcost.spec.stack_options import STACK_OPTIONS, option_for_field, option_text

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ExecSpec)}
_RATE_FIELDS = [f.name for f in dataclasses.fields(Rates) if f.name != "sources"]
_INT_FLAGS = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp", "micro_batch_size", "global_batch_size", "seq_length",
              "zero_stage", "seq_split", "pp_runs")


def _rows():
    out = []
    for name, path in BUILTIN_RUNS.items():
        doc = read_mapping(path, "runs")
        for row in doc["runs"]:
            try:
                built = build_row(row, doc.get("hardware") or {}, path)
            except ValueError:
                continue                      # skipped rows (each with its reason, tests/test_validation.py)
            software = next((note.split()[1].rstrip(",") for note in built.notes if note.startswith("software ")),
                            None)
            out.append((row["id"], built.model, built.spec, built.cluster, built.rates, software))
    doc = read_mapping(MEMORY_FACTS, "memory facts")
    for row in doc["rows"]:
        model, spec, cluster, _ = build_memory_run(row)
        out.append((row["id"], model, spec, cluster, None, "torchtitan-compile"))
    return out


ROWS = _rows()


def _software_of(row_id, rates, software, device):
    """The --software preset of a row: the one its notes name, else (the A100 rows) the preset its rates are."""
    if software in SOFTWARE_PRESETS:
        return software
    for name in sorted(SOFTWARE_PRESETS, key=lambda name: -len(SOFTWARE_PRESETS[name][0])):
        preset = Rates.for_software(device, name)
        if all(getattr(preset, f) == getattr(rates, f) for f in SOFTWARE_PRESETS[name][0]):
            return name
    return None


def _flags(model, spec, cluster, rates, software, tmp_path):
    """The estimate flags that state the row's spec, rates and cluster (a field no flag states is returned)."""
    name = model.name if model.name in models() else _model_file(model, tmp_path)
    words = ["estimate", name, "--devices", str(cluster.num_devices)]
    if model.census and spec.selective_rule == "hyperparallel":
        words += ["--selective-rule", "torchtitan-op"]
    # what --software fills for this strategy, read as the CLI reads it (the flags below state these fields)
    reads = {name: getattr(spec, name) for name in ("dp", "precision", "zero_stage", "recompute", "global_batch_size",
                                                    "micro_batch_size")}
    implied = software_fields(software, spec.tp, spec.pp, spec.cp, moe=model.is_moe, per_op=False,
                              **reads) if software else {}
    if software:
        words += ["--software", software]
    unreachable = []
    for name, default in _DEFAULTS.items():
        value = getattr(spec, name)
        if name in ("global_batch_size", "seq_length", "dp", "micro_batch_size"):
            words += ["--" + name.replace("_", "-"), str(value)]
            continue
        if value == implied.get(name, default):
            continue
        if name in _INT_FLAGS:
            words += ["--" + name.replace("_", "-"), str(value)]
        elif name in ("recompute", "pp_schedule"):
            words += ["--" + name.replace("_", "-"), str(value)]
        elif name == "sequence_parallel":
            words.append("--sequence-parallel" if value else "--no-sequence-parallel")
        elif name == "selective_rule" and model.census:
            continue                                  # stated above as torchtitan-op
        elif option_for_field(name) is not None:
            option = option_for_field(name)
            words += [option.flag, option_text(option, value)]
        else:
            unreachable.append(name)
    preset = Rates.for_software(cluster.device, software) if software else Rates.for_device(cluster.device)
    for name in _RATE_FIELDS:
        if rates is not None and getattr(rates, name) != getattr(preset, name):
            option = next((o for o in STACK_OPTIONS if o.owner == "rates" and o.field == name), None)
            if option is None:
                unreachable.append(f"Rates.{name}")
            else:
                words += [option.flag, option_text(option, getattr(rates, name))]
    catalog = type(cluster.device).from_catalog(cluster.device.name)
    differs = {f.name: getattr(cluster.device, f.name) for f in dataclasses.fields(catalog)
               if f.name != "sources" and getattr(cluster.device, f.name) != getattr(catalog, f.name)}
    file = {"device": cluster.device.name}
    for name, value in differs.items():
        if name == "hbm_visible_bytes" and value is None and "hbm_bytes" in differs:
            continue                    # a stated capacity (hbm_gb) clears the catalog's driver figure itself
        key, scale = {"hbm_bytes": ("hbm_gb", 1e9), "hbm_bandwidth": ("hbm_tb_s", 1e12),
                      "inter_node_bandwidth": ("scale_out_gb_s", 1e9), "intra_node_bandwidth": ("scale_up_gb_s", 1e9),
                      "devices_per_node": ("devices_per_node", 1), "peak_flops": ("peak_tflops", 1e12)}.get(name, (None, 1))
        if key is None:
            unreachable.append(f"Device.{name}")
        elif name == "peak_flops":
            file[key] = {dtype: flops / scale for dtype, flops in value.items()}
        else:
            file[key] = value / scale if scale != 1 else value
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(file))
    words += ["--cluster", str(path)]
    return words, unreachable


def _figures(device):
    return {f.name: getattr(device, f.name) for f in dataclasses.fields(device) if f.name != "sources"}


def _model_file(model, tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in model.to_dict().items() if v is not None}))
    return str(path)


def test_the_rows_set_the_fields_the_stack_table_names():
    """What the shipped rows set, beyond the degrees and the batch: the stack fields this test reaches."""
    fields = set()
    for _, _, spec, cluster, rates, _ in ROWS:
        fields |= {name for name, default in _DEFAULTS.items() if getattr(spec, name) != default}
        if rates is not None:
            base = Rates.for_device(cluster.device)
            fields |= {f"Rates.{name}" for name in _RATE_FIELDS if getattr(rates, name) != getattr(base, name)}
    for expected in ("tp_overlap", "precision", "overlapped_grad_reduce", "dropout_bytes", "flash_attention",
                     "grad_bytes", "moe_dispatcher", "grouped_gemm", "selective_rule", "cp_algo", "param_bytes",
                     "Rates.fp8_recipe", "Rates.grad_accumulation_fusion", "Rates.attention_kernel",
                     "Rates.elementwise", "Rates.zero3_fetch_bandwidth"):
        assert expected in fields, expected


@pytest.mark.parametrize("row_id, model, spec, cluster, rates, software", ROWS, ids=[row[0] for row in ROWS])
def test_every_field_a_shipped_row_sets_is_reachable_from_the_cli(row_id, model, spec, cluster, rates, software,
                                                                  tmp_path):
    software = _software_of(row_id, rates, software, cluster.device) if rates is not None else software
    words, unreachable = _flags(model, spec, cluster, rates, software, tmp_path)
    assert not unreachable, f"{row_id}: no flag states {unreachable}"
    strategy = strategy_from_args(build_parser().parse_args(words))
    assert strategy.spec == spec, row_id
    assert _figures(strategy.cluster.device) == _figures(cluster.device), row_id
    assert strategy.cluster.num_devices == cluster.num_devices
    if rates is not None:
        got = strategy.rates or Rates.for_device(cluster.device)
        assert {n: getattr(got, n) for n in _RATE_FIELDS} == {n: getattr(rates, n) for n in _RATE_FIELDS}, row_id
    assert (strategy.model.census == model.census), row_id
