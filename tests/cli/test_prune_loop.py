"""scripts/prune_loop.py, the prune -> fine-tune -> accept/reject loop (Sakai et al., ICPR 2022), on
a tiny CNN and real Fashion-MNIST batches: one accepted and one rejected iteration, checked against
the prune-rate report of that iteration (the bound U that follows, the model that goes on)."""
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
from test_dist_train import FM, config, fashion_mnist, tiny_cnn  # noqa: F401 (the dataset check)

LOOP = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "prune_loop.py")
PY = shutil.which("python3", path="/usr/bin:/bin") or sys.executable  # the system Python: the loop needs no venv


def loop(tmp, *args, iterations=1):
    cfg = config(tmp, epochs=1, max_steps_per_epoch=6, final_polish_epochs=0, threads=1)
    p = subprocess.run([PY, LOOP, tmp / "tiny.onnx", "--config", cfg, "--out", tmp / "loop", "--ranks", "1",
                        "--iterations", str(iterations), "--finetune-epochs", "1", "--batches", "2", "--validation", "500",
                        *map(str, args)],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, HPCNN_BIN=H.BIN_DIR, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr
    out = tmp / "loop"
    return (json.load(open(out / "log.json")), json.load(open(out / "summary.json")),
            json.load(open(out / "it1" / "prune.json")), out)


def params(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def test_accepted_iteration(tmp_path):
    log, summary, report, out = loop(tmp_path, "--accuracy-drop", 100)  # any accuracy passes
    assert len(log) == 1 and log[0]["accepted"]
    d = report["data_driven"]
    assert log[0]["upper_bound"] == d["upper_bound"]["used"] == d["upper_bound"]["limit"]  # U starts at its limit
    assert log[0]["upper_bound_next"] == pytest.approx(d["upper_bound"]["next_if_accepted"], rel=1e-12)
    assert log[0]["upper_bound_next"] >= min(2 * d["upper_bound"]["used"], d["upper_bound"]["limit"]) * (1 - 1e-12)
    assert report["totals"]["params_after"] < report["totals"]["params_before"]
    # The fine-tuned candidate goes on: final.onnx is it, with the pruned shapes.
    final, tuned, cand = params(out / "final.onnx"), params(out / "it1" / "tuned.onnx"), params(out / "it1" / "candidate.onnx")
    for k in final:
        np.testing.assert_array_equal(final[k], tuned[k])
        assert final[k].shape == cand[k].shape
    assert summary["params_after"] == report["totals"]["params_after"] < summary["params_before"]
    assert summary["accepted"] == 1 and summary["iterations"] == 1
    assert 0 < summary["test_accuracy_after"] <= 1 and 0 < summary["validation_accuracy_after"] <= 1


def test_rejected_iteration(tmp_path):
    log, summary, report, out = loop(tmp_path, "--accuracy-drop", -100)  # would need +100 points
    assert len(log) == 1 and not log[0]["accepted"]
    d = report["data_driven"]
    assert log[0]["upper_bound_next"] == pytest.approx(d["upper_bound"]["next_if_rejected"], rel=1e-12)
    assert log[0]["upper_bound_next"] <= 0.5 * d["upper_bound"]["used"] * (1 + 1e-12)
    # The original model stays, bit for bit.
    final, original = params(out / "final.onnx"), params(tmp_path / "tiny.onnx")
    assert final.keys() == original.keys()
    for k in final:
        np.testing.assert_array_equal(final[k], original[k])
    assert summary["params_after"] == summary["params_before"]
    assert summary["accepted"] == 0


def test_rejections_shrink_the_bound_and_never_retrain_a_rejected_candidate(tmp_path):
    """Three rejected iterations: U shrinks each time (by at least half); a candidate equal to one
    already rejected is not fine-tuned again (those steps are counted apart), so the fine-tuned
    candidates all differ."""
    log, summary, _, out = loop(tmp_path, "--accuracy-drop", -100, iterations=3)
    assert [e["accepted"] for e in log] == [False] * len(log) and 1 <= len(log) <= 3
    for a, b in zip(log, log[1:]):
        assert b["upper_bound"] <= 0.5 * a["upper_bound"] * (1 + 1e-12)
        assert a["kept_channels"] != b["kept_channels"]
    kept = [json.dumps(e["kept_channels"], sort_keys=True) for e in log]
    assert len(set(kept)) == len(kept)
    assert summary["rejected_without_finetuning"] >= 0
    assert summary["iterations"] == len(log)


def test_bad_arguments(tmp_path):
    tiny_cnn(tmp_path / "tiny.onnx")
    for args, text in (([], "usage"), (["--config", tmp_path / "none.json", "--out", tmp_path / "o"], "no configuration"),
                       (["--config", tmp_path / "tiny.onnx", "--out", tmp_path / "o", "--iterations", "0"], "positive")):
        p = subprocess.run([PY, LOOP, tmp_path / "tiny.onnx", *map(str, args)], capture_output=True, text=True,
                           env=dict(os.environ, HPCNN_BIN=H.BIN_DIR))
        assert p.returncode != 0 and text in p.stderr, p.stderr


def test_keep(tmp_path):
    """--keep c1: c1 never loses a filter (its report says why), the summary records it; a name that
    is no layer fails before any work, leaving the output folder empty."""
    log, summary, report, out = loop(tmp_path, "--accuracy-drop", 100, "--keep", "c1")
    c1 = next(l for l in report["layers"] if l["name"] == "c1")
    assert not c1["prunable"] and c1["kept_channels"] == 8 and "--keep c1" in c1["reason"]
    assert summary["keep"] == ["c1"] and report["keep"] == ["c1"]
    bad = tmp_path / "bad"
    cfg = config(tmp_path, epochs=1, max_steps_per_epoch=6, final_polish_epochs=0, threads=1)
    p = subprocess.run([PY, LOOP, tmp_path / "tiny.onnx", "--config", cfg, "--out", bad, "--ranks", "1", "--keep", "c9"],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, HPCNN_BIN=H.BIN_DIR))
    assert p.returncode == 1 and "--keep names 'c9'" in p.stderr
    assert not bad.exists() or not any(bad.iterdir())


def test_resume_after_a_kill(tmp_path):
    """--resume: a run killed during its second iteration continues there and ends as the same
    loop run without interruption ends (iterations, decisions, bounds, final weights); a resume
    with other options is refused; a finished run goes on only with a larger --iterations, and then
    ends as a run started with that many iterations does."""
    import signal
    import time

    (tmp_path / "ref").mkdir()
    ref_log, ref_summary, _, ref_out = loop(tmp_path / "ref", "--accuracy-drop", 100, iterations=3)
    assert len(ref_log) == 3 and all(e["accepted"] for e in ref_log)  # three fine-tunings, the second interrupted below
    run = tmp_path / "run"
    run.mkdir()
    cfg = config(run, epochs=1, max_steps_per_epoch=6, final_polish_epochs=0, threads=1)
    argv = [PY, LOOP, run / "tiny.onnx", "--config", cfg, "--out", run / "loop", "--ranks", "1",
            "--finetune-epochs", "1", "--batches", "2", "--validation", "500", "--accuracy-drop", "100"]
    env = dict(os.environ, HPCNN_BIN=H.BIN_DIR, OMP_NUM_THREADS="1")
    p = subprocess.Popen([*argv, "--iterations", "2"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True)
    deadline = time.time() + 300
    while not (run / "loop" / "it2").exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert p.poll() is None, "the loop ended before its second iteration began"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert not (run / "loop" / "summary.json").exists()
    other = subprocess.run([*argv[:-1], "50", "--iterations", "2", "--resume"], env=env, capture_output=True, text=True, timeout=60)
    assert other.returncode == 1 and "options differ" in other.stderr
    r = subprocess.run([*argv, "--iterations", "2", "--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "resuming at iteration 2" in r.stderr
    drop = ("finetune_seconds", "current_model")
    strip = lambda log: [{k: v for k, v in e.items() if k not in drop} for e in log]  # noqa: E731
    log = json.load(open(run / "loop" / "log.json"))
    assert strip(log) == strip(ref_log[:2])
    done = subprocess.run([*argv, "--iterations", "2", "--resume"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "has finished" in done.stderr
    more = subprocess.run([*argv, "--iterations", "3", "--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert more.returncode == 0, more.stderr
    assert "resuming at iteration 3" in more.stderr
    log, summary = json.load(open(run / "loop" / "log.json")), json.load(open(run / "loop" / "summary.json"))
    assert strip(log) == strip(ref_log)
    for k in ("params_after", "macs_after", "iterations", "accepted", "stopped_by", "validation_accuracy_after"):
        assert summary[k] == ref_summary[k], k
    final, ref_final = params(run / "loop" / "final.onnx"), params(ref_out / "final.onnx")
    assert final.keys() == ref_final.keys()
    for k in final:
        np.testing.assert_array_equal(final[k], ref_final[k])


def test_replay_rebuilds_a_run_from_its_log(tmp_path):
    """--replay LOG: a run rebuilt from a finished run's log.json ends as that run did (decisions,
    bounds, kept channels, final weights bit for bit): rejected iterations are taken from the log
    without fine-tuning, accepted ones are fine-tuned again and checked; iterations past the log run
    as usual. A log that does not match the run (tampered accuracy or channels) stops it with an
    error naming the iteration; a file that is no loop log is refused before any work."""
    strip = lambda log: [{k: v for k, v in e.items() if k not in ("finetune_seconds", "current_model", "replayed")}  # noqa: E731
                         for e in log]
    env = dict(os.environ, HPCNN_BIN=H.BIN_DIR, OMP_NUM_THREADS="1")

    def run(where, log, *args, iterations):
        where.mkdir()
        cfg = config(where, epochs=1, max_steps_per_epoch=6, final_polish_epochs=0, threads=1)
        return subprocess.run([PY, LOOP, where / "tiny.onnx", "--config", cfg, "--out", where / "loop", "--ranks", "1",
                               "--iterations", str(iterations), "--finetune-epochs", "1", "--batches", "2", "--validation", "500",
                               "--replay", log, *map(str, args)], env=env, capture_output=True, text=True, timeout=600)

    # Rejected iterations: nothing is fine-tuned again.
    (tmp_path / "rej").mkdir()
    ref_log, ref_summary, _, _ = loop(tmp_path / "rej", "--accuracy-drop", -100, iterations=2)
    r = run(tmp_path / "rej2", tmp_path / "rej" / "loop" / "log.json", "--accuracy-drop", -100, iterations=2)
    assert r.returncode == 0, r.stderr
    log = json.load(open(tmp_path / "rej2" / "loop" / "log.json"))
    assert strip(log) == strip(ref_log) and all(e["replayed"] for e in log)
    assert [e["finetune_seconds"] for e in log] == [e["finetune_seconds"] for e in ref_log]
    assert not list((tmp_path / "rej2" / "loop").glob("it*/tuned.onnx"))
    summary = json.load(open(tmp_path / "rej2" / "loop" / "summary.json"))
    assert summary["seconds"] >= sum(round(e["finetune_seconds"]) for e in ref_log)

    # Accepted iterations are fine-tuned again; one more iteration than the log runs as usual.
    (tmp_path / "acc").mkdir()
    ref3_log, _, _, ref3_out = loop(tmp_path / "acc", "--accuracy-drop", 100, iterations=3)
    short = tmp_path / "two.json"
    json.dump(ref3_log[:2], open(short, "w"))
    r = run(tmp_path / "acc2", short, "--accuracy-drop", 100, iterations=3)
    assert r.returncode == 0, r.stderr
    log = json.load(open(tmp_path / "acc2" / "loop" / "log.json"))
    assert strip(log) == strip(ref3_log) and not any(e.get("replayed") for e in log)
    final, ref_final = params(tmp_path / "acc2" / "loop" / "final.onnx"), params(ref3_out / "final.onnx")
    assert final.keys() == ref_final.keys()
    for k in final:
        np.testing.assert_array_equal(final[k], ref_final[k])

    # A log the run does not reproduce.
    bad = json.loads(json.dumps(ref3_log[:2]))
    bad[1]["validation_accuracy"] += 0.002
    json.dump(bad, open(tmp_path / "bad_acc.json", "w"))
    r = run(tmp_path / "acc3", tmp_path / "bad_acc.json", "--accuracy-drop", 100, iterations=2)
    assert r.returncode == 1 and "iteration 2: validation accuracy" in r.stderr, r.stderr
    bad = json.loads(json.dumps(ref_log))
    bad[0]["kept_channels"] = {k: v + 1 for k, v in bad[0]["kept_channels"].items()}
    json.dump(bad, open(tmp_path / "bad_kept.json", "w"))
    r = run(tmp_path / "rej3", tmp_path / "bad_kept.json", "--accuracy-drop", -100, iterations=2)
    assert r.returncode == 1 and "diverged" in r.stderr and "iteration 1:" in r.stderr, r.stderr
    (tmp_path / "none.json").write_text('{"iteration": 1}')
    r = run(tmp_path / "none", tmp_path / "none.json", iterations=1)
    assert r.returncode == 1 and "is not a loop's log.json" in r.stderr, r.stderr
    assert not (tmp_path / "none" / "loop").exists()
