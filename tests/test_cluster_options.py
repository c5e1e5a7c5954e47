"""The user's cluster on the command line and in a file: NVLink segments, NICs and their rate, HBM, per-tier
bandwidths; estimate, search and validate take them, and a contradiction is one line naming it."""
from __future__ import annotations

import pytest
import yaml

from ndcost.cli.args import strategy_from_args
from cli_cases import refused
from ndcost.cli.main import build_parser, main
from ndcost.spec.cluster_options import cluster_keywords, read_cluster_file

GB200 = {"device": "gb200-nvl72", "devices_per_node": 64, "devices_per_host": 4, "nics_per_host": 8, "nic_gbps": 200,
         "name": "GB200 NVL72 racks in 64-GPU NVLink segments, 4-GPU trays with 8 x 200G NICs"}


def _file(tmp_path, doc, name="cluster.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_nics_make_the_per_device_scale_out_rate():
    keywords = cluster_keywords({"devices_per_host": 4, "nics_per_host": 8, "nic_gbps": 200})
    assert keywords["inter_node_bandwidth"] == 8 * 200e9 / 8 / 4          # 50 GB/s per GPU per direction
    assert cluster_keywords({"scale_up_gb_s": 900, "hbm_gb": 96}) == {"intra_node_bandwidth": 900e9,
                                                                      "hbm_bytes": 96e9}


def test_a_gb200_job_in_64_gpu_segments_from_a_file_and_from_flags(tmp_path):
    path = _file(tmp_path, GB200)
    words = ["estimate", "llama3-70b", "--cluster", path, "--devices", "128", "--dp", "16", "--tp", "8",
             "--global-batch-size", "256", "--seq-length", "8192"]
    s = strategy_from_args(build_parser().parse_args(words))
    assert s.cluster.device.devices_per_node == 64 and s.cluster.device.inter_node_bandwidth == 50e9
    assert "stated:" in s.cluster.device.sources["devices_per_node"]
    flags = ["estimate", "llama3-70b", "--device", "gb200-nvl72", "--devices-per-node", "64", "--devices-per-host",
             "4", "--nics-per-host", "8", "--nic-gbps", "200", "--devices", "128", "--dp", "16", "--tp", "8",
             "--global-batch-size", "256", "--seq-length", "8192"]
    t = strategy_from_args(build_parser().parse_args(flags))
    assert t.cluster.device.inter_node_bandwidth == s.cluster.device.inter_node_bandwidth
    assert main(words) == 0


def test_the_issue_search_runs_where_72_per_rack_refused_it(tmp_path, capsys):
    argv = ["search", "llama3-70b", "--devices", "256", "--device", "gb200-nvl72", "--global-batch-size", "512",
            "--seq-length", "8192", "--no-progress", "--top", "3"]
    refused(capsys, argv, "num_devices", "multiple")
    assert main(argv + ["--devices-per-node", "64"]) == 0
    assert "on 256 x gb200-nvl72" in capsys.readouterr().out
    assert main([*argv[:4], "--cluster", _file(tmp_path, GB200), *argv[6:]]) == 0


def test_hbm_and_tier_flags_change_the_price(capsys):
    base = ["estimate", "llama3-70b", "--device", "h100-sxm", "--dp", "8", "--tp", "8", "--pp", "2",
            "--global-batch-size", "256", "--seq-length", "8192", "--json"]
    import json

    prices = {}
    for extra in ([], ["--scale-out-gb-s", "12.5"], ["--hbm-gb", "40"]):
        assert main(base + extra) == 0
        prices[tuple(extra)] = json.loads(capsys.readouterr().out)
    assert prices[("--scale-out-gb-s", "12.5")]["step_time"] > prices[()]["step_time"]
    assert prices[("--hbm-gb", "40")]["memory"]["capacity_bytes"] == 40e9


@pytest.mark.parametrize("doc, words", [
    ({"device": "h900"}, ("'device'", "did you mean")),
    ({"device": "h100-sxm", "nvlink": 8}, ("'nvlink'",)),
    ({"device": "h100-sxm", "nics_per_host": 8}, ("'devices_per_host'", "nics_per_host")),
    ({"device": "h100-sxm", "devices_per_host": 8, "nics_per_host": 8, "nic_gbps": 400, "scale_out_gb_s": 50},
     ("scale_out_gb_s", "NICs")),
    ({"device": "h100-sxm", "hbm_gb": -1}, ("'hbm_gb'", "> 0")),
    ({"devices_per_node": 8}, ("'device'",)),
])
def test_bad_cluster_files(tmp_path, capsys, doc, words):
    refused(capsys, ["estimate", "llama3-8b", "--cluster", _file(tmp_path, doc), "--dp", "8",
                      "--global-batch-size", "64"], *words)


def test_nd_units_refuse_the_rates_they_do_not_price(capsys):
    base = ["estimate", "llama3-8b", "--device", "h100-sxm", "--dp", "8", "--global-batch-size", "64", "--units", "nd"]
    refused(capsys, base + ["--scale-out-gb-s", "25"], "--scale-out-gb-s", "seconds units only")
    assert main(base + ["--hbm-gb", "40", "--devices-per-node", "4"]) == 0


def test_a_flag_and_the_file_must_agree(tmp_path, capsys):
    path = _file(tmp_path, GB200)
    base = ["estimate", "llama3-70b", "--cluster", path, "--devices", "128", "--dp", "16", "--tp", "8",
            "--global-batch-size", "256"]
    refused(capsys, base + ["--devices-per-node", "72"], "--devices-per-node", "agree", "64")
    refused(capsys, base + ["--device", "h100-sxm"], "--device", "agree")
    assert main(base + ["--devices-per-node", "64", "--device", "gb200"]) == 0      # the alias names the same part
    refused(capsys, ["estimate", "llama3-8b", "--dp", "8", "--global-batch-size", "64"], "--device", "--cluster")


def test_validate_takes_a_cluster_file_for_rows_that_name_no_hardware(tmp_path, capsys):
    runs = {"runs": [{"id": "mine_8b_16gpu", "model": "llama3.1-8b",
                      "strategy": {"gpus": 16, "tp": 2, "micro_batch": 1, "global_batch": 64, "recompute": "none",
                                   "software": "megatron-te", "seq_len": 8192},
                      "measured": {"iteration_s": 2.0}}]}
    runs_path = _file(tmp_path, runs, "runs.yaml")
    cluster = _file(tmp_path, {"device": "h100-sxm", "scale_out_gb_s": 25})
    assert main(["validate", runs_path, "--cluster", cluster]) == 0
    assert "the --cluster file" in capsys.readouterr().out
    assert main(["validate", runs_path]) == 1                     # no row could be priced (issue 25): status 1
    assert "skipped" in capsys.readouterr().out                   # no hardware, no --cluster: refused, named
    runs["runs"][0]["hardware"] = "dgx"
    runs["hardware"] = {"dgx": {"device": "h100-sxm"}}
    refused(capsys, ["validate", _file(tmp_path, runs, "named.yaml"), "--cluster", cluster], "--cluster",
             "name no hardware")
    assert read_cluster_file(cluster)["scale_out_gb_s"] == 25.0
