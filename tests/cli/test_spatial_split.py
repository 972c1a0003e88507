"""dist-train with a spatial split of 3-D samples (issue 43; nn/spatial.h, spatial/group.h):
under mpirun, groups of S consecutive ranks share each sample, one depth slab per rank, with halo
exchange before every 3-D conv and an allgather where the graph leaves the slabs. Checks that
-np 2 with S = 2 and -np 4 with 2 data x 2 spatial give the weights of one process on the same
global batch after 3 steps, the halo bytes per step against the closed form, the gradient bytes
(the layers after the gather summed over the replicas only), the test metrics, and
the refusals before training (S not dividing the ranks or the depth); BatchNormalization on slabs
(the group's statistics); each rank reading only its slab's bytes; --evaluate and bn-polish with
S = 2 against S = 1."""
import json
import os
import subprocess

import numpy as np
import pytest

import hpcnn_test as H
from test_dist_train import dist_train, ok, weights
from test_dist_train_3d import config, cosmo_tiny


def run(tmp, ranks, spatial, batch, **over):
    tmp.mkdir(exist_ok=True)
    cfg = config(tmp, **{"epochs": 1, "max_steps_per_epoch": 3, "batch_size": batch, "deterministic": True, **over})
    return dist_train("--config", cfg, "--spatial-split", spatial, ranks=ranks if ranks > 1 else 0)


@pytest.mark.parametrize("ranks,spatial", [(2, 2), (4, 2)])
def test_spatial_split_equals_one_process(tmp_path, ranks, spatial):
    """One process with the global batch (batch x replicas) against the split run."""
    replicas = ranks // spatial
    ref = ok(run(tmp_path / "one", 1, 1, 8 * replicas))
    p = run(tmp_path / "split", ranks, spatial, 8)
    s = ok(p)
    assert s["spatial_split"] == spatial and s["global_batch"] == ref["global_batch"] == 8 * replicas and s["steps"] == 3
    assert "spatial split 2: " + str(replicas) + " groups of 2 ranks, slabs of 4 of 8 planes" in p.stderr
    a, b = weights(tmp_path / "one" / "trained.onnx"), weights(tmp_path / "split" / "trained.onnx")
    start = weights(cosmo_tiny(tmp_path / "start.onnx"))
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6 * np.abs(a[k]).max(), err_msg=k)
    assert not np.allclose(a["c1.w"], start["c1.w"])
    # Train and test metrics count every sample once.
    assert s["train_loss"] == pytest.approx(ref["train_loss"], rel=1e-5)
    assert s["test_mae"] == pytest.approx(ref["test_mae"], rel=1e-5)
    # Halo bytes: 2 slabs, one conv (k 3, pads 1: one plane each way) whose input needs no
    # gradient: forward only, each rank sends one plane of 4 channels x 8 x 8 floats per sample.
    assert s["halo_bytes_per_step"] == 8 * 4 * 8 * 8 * 4
    # The Gemm after the gather has the same gradient on both ranks of a group: it is summed over
    # the replicas only, and with one replica not exchanged at all (the conv's partial sums are).
    conv = sum(start[k].size for k in ("c1.w", "c1.b"))
    dense = sum(start[k].size for k in ("fc.w", "fc.b"))
    assert s["bytes_exchanged_per_step"] == 4 * (conv + (dense if replicas > 1 else 0))
    tail = "summed over the 2 replicas only" if replicas > 1 else "one replica, not exchanged"
    assert f"the gradients of the 2 parameters from fc.w on ({dense} values) are the same on the 2 ranks of a group: {tail}" in p.stderr


def test_spatial_split_refusals(tmp_path):
    p = run(tmp_path / "a", 2, 4, 8)
    assert p.returncode == 1 and "parallel.spatial 4 does not divide the 2 ranks" in p.stderr, p.stderr[-2000:]
    p = run(tmp_path / "b", 3, 3, 8)
    assert p.returncode == 1 and "depth 8, which 3 slabs do not divide" in p.stderr, p.stderr[-2000:]
    for d in ("a", "b"):
        assert not (tmp_path / d / "trained.onnx").exists() and not (tmp_path / d / "metrics.jsonl").exists()


def test_checkpoints_move_between_split_and_whole(tmp_path):
    """The weights are whole on every rank: a checkpoint written with S = 2 resumes with S = 1 (and
    one written with S = 1 resumes with S = 2), continuing the run of one process within float
    rounding."""
    ref = tmp_path / "ref"
    ref.mkdir()
    # A constant learning rate: the first leg's schedule (1 epoch) is then the reference's (2 epochs).
    lr = {"decay": "constant", "warmup_epochs": 0}
    ok(dist_train("--config", config(ref, epochs=2, max_steps_per_epoch=3, batch_size=8, deterministic=True, lr=lr)))
    for first, second in ((2, 1), (1, 2)):
        d = tmp_path / f"s{first}{second}"
        d.mkdir()
        cfg = config(d, epochs=1, max_steps_per_epoch=3, batch_size=8, deterministic=True, lr=lr,
                     checkpoint={"path": str(d / "ckpt"), "interval_epochs": 1})
        ok(dist_train("--config", cfg, "--spatial-split", first, ranks=first if first > 1 else 0))
        s = ok(dist_train("--config", cfg, "--spatial-split", second, "--resume", d / "ckpt", "--epochs", 2, "-f",
                          ranks=second if second > 1 else 0))
        assert s["steps"] == 6 and s["spatial_split"] == second
        a, b = weights(ref / "trained.onnx"), weights(d / "trained.onnx")
        for k in a:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6 * np.abs(a[k]).max(), err_msg=f"{first}->{second} {k}")


def close(a, b, what):
    # atol against the model's largest weight: a conv bias before a BatchNormalization gets a
    # gradient of zero up to rounding and stays at about 1e-11, with no scale of its own.
    largest = max(float(np.abs(v).max()) for v in a.values())
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6 * largest, err_msg=f"{what}: {k}")


def test_batchnorm_on_slabs_equals_one_process(tmp_path):
    """A BatchNormalization on the conv output of each slab normalises with the group's batch
    statistics (the whole samples'): -np 2 with S = 2 gives one process's weights and running
    statistics after 3 steps."""
    for d in ("one", "split"):
        (tmp_path / d).mkdir()
        cosmo_tiny(tmp_path / d / "cosmo.onnx", batchnorm=True)
    ref = ok(run(tmp_path / "one", 1, 1, 8))
    s = ok(run(tmp_path / "split", 2, 2, 8))
    a, b = weights(tmp_path / "one" / "trained.onnx"), weights(tmp_path / "split" / "trained.onnx")
    close(a, b, "S = 2 against one process")
    assert not np.allclose(a["bn.mean"], 0.5) and not np.allclose(a["bn.var"], 4.0)  # the running statistics moved
    assert s["train_loss"] == pytest.approx(ref["train_loss"], rel=1e-5)
    assert s["test_mae"] == pytest.approx(ref["test_mae"], rel=1e-5)


def test_each_rank_reads_only_its_slab(tmp_path):
    """Samples read from the file (data.cache false): rank 0 of a 2-slab group reads half of each
    volume's bytes. One epoch of 64 int16 volumes [4, 8, 8, 8]: 64 x 4 x 8^3 x 2 bytes for S = 1."""
    one = ok(run(tmp_path / "one", 1, 1, 8, data={"cache": False}, max_steps_per_epoch=0))
    two = ok(run(tmp_path / "two", 2, 2, 8, data={"cache": False}, max_steps_per_epoch=0))
    assert one["steps"] == two["steps"] == 8
    assert one["train_file_bytes_read"] == 64 * 4 * 8 ** 3 * 2
    assert two["train_file_bytes_read"] == 64 * 4 * 8 ** 3 * 2 // 2
    cached = ok(run(tmp_path / "cached", 1, 1, 8, max_steps_per_epoch=1))
    assert cached["train_file_bytes_read"] == 0  # in memory: read once, when loaded


def test_evaluate_and_bn_polish_with_a_split(tmp_path):
    """dist-train --evaluate and bn-polish run the split model (BatchNorm on slabs included) and
    report what one process reports."""
    model = cosmo_tiny(tmp_path / "cosmo.onnx", batchnorm=True)
    cfg = config(tmp_path)
    one = ok(dist_train("--config", cfg, "--evaluate", model))
    two = ok(dist_train("--config", cfg, "--evaluate", model, "--spatial-split", 2, ranks=2))
    assert two["spatial_split"] == 2 and two["samples"] == one["samples"] == 16
    for k in ("mse", "mae"):
        assert two[k] == pytest.approx(one[k], rel=1e-5), k
    np.testing.assert_allclose(two["mae_per_target"], one["mae_per_target"], rtol=1e-5)

    def polish(out, *launch, spatial=1):
        p = subprocess.run([*launch, H.tool("bn-polish"), str(model), "--config", str(cfg), "-o", str(out),
                            "--spatial-split", str(spatial), "--test-accuracy"],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    r1 = polish(tmp_path / "p1.onnx")
    r2 = polish(tmp_path / "p2.onnx", *H.launch(2), spatial=2)
    assert r2["spatial_split"] == 2 and r2["samples"] == r1["samples"] == 64
    close(weights(tmp_path / "p1.onnx"), weights(tmp_path / "p2.onnx"), "bn-polish S = 2 against S = 1")
    assert r2["test_mae_after"] == pytest.approx(r1["test_mae_after"], rel=1e-5)
    # A split that does not fit the model is refused before anything is written.
    p = subprocess.run([*H.launch(2), H.tool("bn-polish"), str(model), "--config", str(cfg), "-o", str(tmp_path / "p3.onnx"),
                        "--spatial-split", "3"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "does not divide the 2 ranks" in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "p3.onnx").exists()
