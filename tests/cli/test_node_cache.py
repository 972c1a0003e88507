"""The node-local data cache on one host (data.node_cache, lib/measure/node_cache.h; the two-host
case is tests/cli/test_two_hosts.py): 2 ranks under mpirun on huffgpu shards. With the cache on,
the node's local rank 0 alone decodes (the summary's files_decoded_by_rank, counted where files are
decoded) and the run trains bitwise the weights of per-rank decoding (off), the independent path of
before; auto is on with 2 ranks on the node and off when each rank is a node of its own (the test
split HPCNN_TEST_NODE_SPLIT=block:1), where on still works (a window of one rank per node).
bn-polish under mpirun opens its data the same way and writes the same model either way. A bad
data.node_cache value is a usage error naming the key."""
import json
import subprocess

import numpy as np

import hpcnn_test as H
from test_dist_train import config, dist_train, ok, small_idx, weights


def shards(d, n=512):
    raw = small_idx(d, n)
    for f in (raw["train_images"], raw["train_labels"]):
        H.run("huffgpu-encode", "-q", "-f", f)
    return dict(raw, train_images=raw["train_images"] + ".huf", train_labels=raw["train_labels"] + ".huf")


def run(tmp_path, name, mode, env=None):
    d = tmp_path / name
    d.mkdir()
    cfg = config(d, epochs=1, final_polish_epochs=0, deterministic=True, max_steps_per_epoch=4, batch_size=16,
                 data=dict(shards(d), node_cache=mode))
    s = ok(dist_train("--config", cfg, ranks=2, env=env, timeout=300))
    return s, weights(d / "trained.onnx")


def fields(s):
    return {k: s["node_cache"][k] for k in ("setting", "nodes", "nodes_shared", "files_decoded_by_rank")}


def test_on_decodes_once_per_node_and_trains_what_off_trains(tmp_path):
    runs = {m: run(tmp_path, m, m) for m in ("on", "off", "auto")}
    assert fields(runs["on"][0]) == {"setting": "on", "nodes": 1, "nodes_shared": 1, "files_decoded_by_rank": [2, 0]}
    assert fields(runs["auto"][0]) == {"setting": "auto", "nodes": 1, "nodes_shared": 1, "files_decoded_by_rank": [2, 0]}
    assert fields(runs["off"][0]) == {"setting": "off", "nodes": 1, "nodes_shared": 0, "files_decoded_by_rank": [2, 2]}
    ref = runs["off"][1]
    for m in ("on", "auto"):
        assert all(np.array_equal(runs[m][1][k], ref[k]) for k in ref), m
        assert runs[m][0]["train_loss"] == runs["off"][0]["train_loss"], m


def test_one_rank_per_node(tmp_path):
    """Each rank a node of its own (the test split): auto decodes per rank, on gives each node a window."""
    env = {"HPCNN_TEST_NODE_SPLIT": "block:1"}
    auto, w_auto = run(tmp_path, "auto", "auto", env)
    on, w_on = run(tmp_path, "on", "on", env)
    assert fields(auto) == {"setting": "auto", "nodes": 2, "nodes_shared": 0, "files_decoded_by_rank": [2, 2]}
    assert fields(on) == {"setting": "on", "nodes": 2, "nodes_shared": 2, "files_decoded_by_rank": [2, 2]}
    assert all(np.array_equal(w_on[k], w_auto[k]) for k in w_on)


def test_bn_polish_under_mpirun_the_same_either_way(tmp_path):
    outs = {}
    for mode in ("on", "off"):
        d = tmp_path / mode
        d.mkdir()
        cfg = config(d, data=dict(shards(d), node_cache=mode))
        p = subprocess.run([*H.launch(2), H.tool("bn-polish"), d / "tiny.onnx", "--config", cfg, "-o", d / "polished.onnx"],
                           capture_output=True, text=True, timeout=300, env=dict(__import__("os").environ, OMP_NUM_THREADS="1"))
        assert p.returncode == 0, p.stderr
        outs[mode] = weights(d / "polished.onnx")
    assert all(np.array_equal(outs["on"][k], outs["off"][k]) for k in outs["on"])


def test_bad_node_cache_value(tmp_path):
    cfg = config(tmp_path, data={"node_cache": "maybe"})
    p = dist_train("--config", cfg)
    assert p.returncode == 1 and "data.node_cache must be auto, on or off, got 'maybe'" in p.stderr, p.stderr


def test_no_shared_window_falls_back(tmp_path):
    """Open MPI with pml monitoring enabled gives windows that are not shared ones
    (MPI_Win_shared_query: MPI_ERR_RMA_FLAVOR), on every rank of the node alike: the node decodes per
    rank with a warning naming the reason, and trains what off trains (found by the two-host byte
    counter tests, which run dist-train so)."""
    runs = {}
    for mode, extra in (("off", []), ("on", ["--mca", "pml_monitoring_enable", "1"])):
        d = tmp_path / mode
        d.mkdir()
        cfg = config(d, epochs=1, final_polish_epochs=0, deterministic=True, max_steps_per_epoch=4, batch_size=16,
                     data=dict(shards(d), node_cache=mode))
        p = subprocess.run([*H.launch(2, *extra), H.tool("dist-train"), "--config", cfg], capture_output=True, text=True,
                           timeout=300, env=dict(__import__("os").environ, OMP_NUM_THREADS="1"))
        runs[mode] = (ok(p), weights(d / "trained.onnx"), p.stderr)
    s, w, err = runs["on"]
    assert "node cache off on" in err and "the MPI library gave no shared-memory window (MPI_Win_shared_query" in err, err
    assert fields(s) == {"setting": "on", "nodes": 1, "nodes_shared": 0, "files_decoded_by_rank": [2, 2]}
    assert all(np.array_equal(w[k], runs["off"][1][k]) for k in w)
