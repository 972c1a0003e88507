"""dist-train with a spatial split of 3-D samples (issue 43; nn/spatial.h, train/spatial_group.h):
under mpirun, groups of S consecutive ranks share each sample, one depth slab per rank, with halo
exchange before every 3-D conv and an allgather where the graph leaves the slabs. Checks that
-np 2 with S = 2 and -np 4 with 2 data x 2 spatial give the weights of one process on the same
global batch after 3 steps, the halo bytes per step against the closed form, the test metrics, and
the refusals before training (S not dividing the ranks or the depth)."""
import json

import numpy as np
import pytest

from test_dist_train import dist_train, ok, weights
from test_dist_train_3d import config, cosmo_tiny


def run(tmp, ranks, spatial, batch, **over):
    tmp.mkdir()
    cfg = config(tmp, epochs=1, max_steps_per_epoch=3, batch_size=batch, deterministic=True, **over)
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
