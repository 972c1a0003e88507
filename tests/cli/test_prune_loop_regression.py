"""scripts/prune_loop.py on a regression model (the configuration's "task": "regression"): a tiny
CosmoFlow-like 3-D CNN on int16 count volumes with float targets (tests/cli/test_dist_train_3d.py's
cosmo_tiny() and volumes()). The original model's validation MAE is measured; a candidate is
accepted when its fine-tuned validation MAE is at most that times (1 + --mae-increase). Checks the
accept and reject decisions against that rule and against dist-train --evaluate, the log and
summary keys, a --replay of a rejected regression run, and the option errors (--accuracy-drop with
a regression configuration, --mae-increase with a classification one)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import hpcnn_test as H
from test_dist_train import dist_train, ok  # the runner of every dist-train test
from test_dist_train_3d import config as config_3d, cosmo_tiny

LOOP = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "prune_loop.py")
PY = shutil.which("python3", path="/usr/bin:/bin") or sys.executable  # the system Python: the loop needs no venv
VALIDATION = 16  # of the 64 training volumes


def setup(tmp):
    """A trained tiny 3-D regression model (2 epochs) and its configuration."""
    cosmo_tiny(str(tmp / "cosmo.onnx"))
    cfg = config_3d(tmp, epochs=2, augmentation={"random_axis_permutation": False})
    ok(dist_train("--config", cfg, "--set", f"data.validation_samples={VALIDATION}"))
    return cfg, tmp / "trained.onnx"


def run_loop(tmp, cfg, model, *args, iterations=1, out="loop"):
    return subprocess.run([PY, LOOP, model, "--config", cfg, "--out", tmp / out, "--ranks", "1", "--iterations", str(iterations),
                           "--finetune-epochs", "1", "--batches", "2", "--validation", str(VALIDATION), *map(str, args)],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, HPCNN_BIN=H.BIN_DIR, OMP_NUM_THREADS="1"))


def results(out):
    return json.load(open(out / "log.json")), json.load(open(out / "summary.json"))


def evaluate(cfg, model, split):
    return ok(dist_train("--config", cfg, "--set", f"data.validation_samples={VALIDATION}", "--evaluate", model, "--split", split))


def params(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reg")
    return setup(tmp)


def check_rule(log, summary):
    """Every decision follows the MAE rule, against the original model's validation MAE."""
    limit = summary["validation_mae_before"] * (1 + summary["mae_increase"])
    assert summary["validation_mae_limit"] == pytest.approx(limit, rel=1e-15)
    for e in log:
        assert e["accepted"] == (e["validation_mae"] <= summary["validation_mae_limit"]), e
        assert "validation_accuracy" not in e and e["validation_mse"] > 0


def test_accepted_regression_iteration(trained, tmp_path):
    cfg, model = trained
    p = run_loop(tmp_path, cfg, model, "--mae-increase", 10)  # any MAE up to 11x the original's passes
    assert p.returncode == 0, p.stderr
    out = tmp_path / "loop"
    log, summary = results(out)
    assert "original validation MAE" in p.stderr and "validation MAE" in p.stderr and "accuracy" not in p.stderr.replace(
        "stop_at_validation_accuracy", "")
    assert len(log) >= 1 and log[0]["accepted"]
    check_rule(log, summary)
    # The keys of a regression summary, the accuracies' absent.
    for k in ("validation_mae_before", "validation_mae_after", "validation_mse_before", "validation_mse_after",
              "test_mae_before", "test_mae_after", "test_mse_before", "test_mse_after",
              "test_mae_per_target_before", "test_mae_per_target_after"):
        assert k in summary, k
    assert summary["task"] == "regression" and summary["mae_increase"] == 10
    assert not any("accuracy" in k for k in summary), summary
    # The figures are dist-train --evaluate's, of the original and of final.onnx (the last accepted model).
    before, after = evaluate(cfg, model, "validation"), evaluate(cfg, out / "final.onnx", "validation")
    assert summary["validation_mae_before"] == before["mae"] and summary["validation_mae_after"] == after["mae"]
    assert summary["validation_mse_before"] == before["mse"] and summary["validation_mse_after"] == after["mse"]
    test_after = evaluate(cfg, out / "final.onnx", "test")
    assert summary["test_mae_after"] == test_after["mae"] and summary["test_mae_per_target_after"] == test_after["mae_per_target"]
    last = max(e["iteration"] for e in log if e["accepted"])
    final, tuned = params(out / "final.onnx"), params(out / f"it{last}" / "tuned.onnx")
    for k in final:
        np.testing.assert_array_equal(final[k], tuned[k])
    assert summary["params_after"] < summary["params_before"]
    # Fine-tuning ran its epoch without the early stop (refused for regression) and without test data.
    m = [json.loads(x) for x in (out / "it1" / "metrics.jsonl").read_text().splitlines()]
    assert len(m) == 1 and "validation_mae" in m[0] and "test_mae" not in m[0]
    assert log[0]["validation_mae"] == m[0]["validation_mae"]


def test_rejected_regression_iteration_and_its_replay(trained, tmp_path):
    cfg, model = trained
    p = run_loop(tmp_path, cfg, model, "--mae-increase", -0.99, iterations=2)  # would need 1% of the original MAE
    assert p.returncode == 0, p.stderr
    out = tmp_path / "loop"
    log, summary = results(out)
    assert log and not any(e["accepted"] for e in log)
    check_rule(log, summary)
    assert summary["validation_mae_limit"] == pytest.approx(0.01 * summary["validation_mae_before"])
    assert summary["accepted"] == 0 and summary["params_after"] == summary["params_before"]
    final, original = params(out / "final.onnx"), params(model)
    for k in original:
        np.testing.assert_array_equal(final[k], original[k])
    assert summary["validation_mae_after"] == summary["validation_mae_before"]
    # --replay of the rejected run: nothing is fine-tuned again, the log is the same.
    r = run_loop(tmp_path, cfg, model, "--mae-increase", -0.99, "--replay", out / "log.json", iterations=2, out="replay")
    assert r.returncode == 0, r.stderr
    strip = lambda log: [{k: v for k, v in e.items() if k not in ("current_model", "replayed")} for e in log]  # noqa: E731
    rlog, _ = results(tmp_path / "replay")
    assert strip(rlog) == strip(log) and all(e["replayed"] for e in rlog)
    assert not list((tmp_path / "replay").glob("it*/tuned.onnx"))
    # A classification run's log is no regression log.
    cls = [{**{k: v for k, v in e.items() if k not in ("validation_mae", "validation_mse")}, "validation_accuracy": 0.5} for e in log]
    json.dump(cls, open(tmp_path / "cls.json", "w"))
    r = run_loop(tmp_path, cfg, model, "--replay", tmp_path / "cls.json", out="bad")
    assert r.returncode == 1 and "no validation_mae (it has validation_accuracy: a classification run's log)" in r.stderr, r.stderr
    assert not (tmp_path / "bad").exists()


def test_option_errors(tmp_path):
    """--accuracy-drop with a regression configuration and --mae-increase with a classification
    one are errors before any work (exit 1, nothing written); so is a bad --mae-increase."""
    cosmo_tiny(str(tmp_path / "cosmo.onnx"))
    cfg = config_3d(tmp_path)
    r = run_loop(tmp_path, cfg, tmp_path / "cosmo.onnx", "--accuracy-drop", 1)
    assert r.returncode == 1 and "--accuracy-drop is a classification option" in r.stderr and "--mae-increase" in r.stderr, r.stderr
    assert not (tmp_path / "loop").exists()
    cls = json.loads(cfg.read_text())
    cls.pop("task")
    (tmp_path / "cls.json").write_text(json.dumps(cls))
    r = run_loop(tmp_path, tmp_path / "cls.json", tmp_path / "cosmo.onnx", "--mae-increase", 0.1)
    assert r.returncode == 1 and "--mae-increase is a regression option" in r.stderr and "--accuracy-drop" in r.stderr, r.stderr
    assert not (tmp_path / "loop").exists()
    for bad, text in (("-1", "must be > -1"), ("x", "must be a number"), ("nan", "must be a number")):
        r = run_loop(tmp_path, cfg, tmp_path / "cosmo.onnx", "--mae-increase", bad)
        assert r.returncode == 1 and f"--mae-increase {text}" in r.stderr, r.stderr
    (tmp_path / "task.json").write_text(json.dumps({**cls, "task": "segmentation"}))
    r = run_loop(tmp_path, tmp_path / "task.json", tmp_path / "cosmo.onnx")
    assert r.returncode == 1 and '"task": "segmentation"' in r.stderr, r.stderr
    assert not (tmp_path / "loop").exists()
