"""studies/prune/report.py: the study's table from a made-up study folder (values chosen so
that the means and standard deviations are known by hand), and the same table again from its
--record copy, which holds the base model and no other, and no unfinished seed. And
studies/prune/run.sh's refusal to continue a study folder made with other settings."""
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
REPORT = os.path.join(ROOT, "studies", "prune", "report.py")


def write(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(value if isinstance(value, str) else json.dumps(value))


def make_study(out):
    d = os.path.join(out, "cnn")
    write(os.path.join(d, "base.onnx"), "not read")
    write(os.path.join(d, "base.onnx.speed.json"), {"images_per_second": 1000.0, "test_accuracy": 0.9300})
    write(os.path.join(d, "base.seconds"), "600")
    write(os.path.join(d, "settings.json"), {"final_epochs": 10})
    # loop: 200,000 and 100,000 parameters left of 400,000; test 93.10% and 92.90%:
    # mean 150,000 (-62.5%), accuracy 93.00 ± 0.14 (sd of 93.1, 92.9 = 0.1414).
    for s, (params, acc, epochs, secs) in enumerate([(200000, 0.9310, [4, 2], 900), (100000, 0.9290, [4, 4, 4], 1100)], 1):
        r = os.path.join(d, f"loop-s{s}")
        write(os.path.join(r, "summary.json"), {"params_before": 400000, "params_after": params, "macs_before": 9000000,
                                                 "macs_after": params * 20, "iterations": len(epochs), "seconds": secs})
        write(os.path.join(r, "log.json"), [{"finetune_epochs": e} for e in epochs])
        write(os.path.join(r, "final_tuned.test.json"), {"test_accuracy": acc})
        write(os.path.join(r, "final_tuned.onnx.speed.json"), {"images_per_second": 1500.0 + 100 * s, "test_accuracy": acc})
        write(os.path.join(r, "final_tuned.seconds"), "300")
        for model in ("final.onnx", "final_tuned.onnx"):  # models a record leaves out
            write(os.path.join(r, model), "not read")
        u = os.path.join(d, f"uniform-s{s}")
        write(os.path.join(u, "summary.json"), {"rate": 0.4 if s == 1 else 0.41, "params_before": 400000, "params_after": 150000,
                                                 "macs_before": 9000000, "macs_after": 3000000})
        write(os.path.join(u, "final_tuned.test.json"), {"test_accuracy": 0.9250 + 0.0010 * s})
        write(os.path.join(u, "final_tuned.seconds"), "240")
    # an unfinished seed (no test accuracy yet) is left out
    write(os.path.join(d, "loop-s3", "summary.json"), {"params_before": 400000, "params_after": 1, "macs_before": 1, "macs_after": 1,
                                                        "iterations": 1, "seconds": 1})


def report(*args, check=True):
    p = subprocess.run([sys.executable, REPORT, *args], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
    return p.stdout if check else p


def test_table_and_record(tmp_path):
    out = str(tmp_path / "study")
    make_study(out)
    rec = str(tmp_path / "record")
    table = report(out, "--record", rec)
    rows = {line.split(" | ")[1]: line for line in table.splitlines() if line.startswith("| CNN")}
    loop = rows["automatic rates (loop)"]
    assert "400,000 → 150,000 (−62.5%)" in loop
    assert "93.00 → 93.00 ± 0.14" in loop
    assert "1,000 → 1,650 ± 71" in loop          # speeds 1,600 and 1,700
    assert "| 2.5 ± 0.7 |" in loop                # iterations 2 and 3
    assert "9 ± 4 search + 10 final" in loop      # search epochs 6 and 12
    assert "22 min per seed (+ base training 10 min)" in loop  # (900 + 300 + 1100 + 300) / 2 = 1,300 s
    uniform = rows["uniform rate 0.4, 0.41"]  # each seed's rate
    assert "93.00 → 92.65 ± 0.07" in uniform
    assert "| 2 |" in uniform
    assert os.path.exists(os.path.join(out, "accuracy_vs_params.png"))
    # The record: small files and the base model only, and the same table made from it alone.
    kept = sorted(os.path.relpath(os.path.join(dp, f), rec) for dp, _, fs in os.walk(rec) for f in fs)
    assert "cnn/base.onnx" in kept and "cnn/loop-s1/log.json" in kept and "table.md" in kept
    assert not [k for k in kept if k.endswith(".onnx") and k != "cnn/base.onnx"], kept
    # The unfinished seed 3 (its loop's summary without a final fine-tuning) is left out whole: a
    # study continued from the record must run its loop again, not skip to a missing final.onnx.
    assert not [k for k in kept if k.startswith("cnn/loop-s3")], kept
    assert report(rec) == table


def test_equal_budget_rows_and_per_seed_differences(tmp_path):
    """UNIFORM_BUDGET=equal's uniform-eq-s<s>/ runs: their own row (epochs = the loop's search +
    final, each seed's), and the loop's lead per seed over both baselines, in points of test accuracy."""
    out = str(tmp_path / "study")
    make_study(out)
    d = os.path.join(out, "cnn")
    for s, (epochs, acc) in enumerate([(16, 0.9300), (22, 0.9296)], 1):
        u = os.path.join(d, f"uniform-eq-s{s}")
        write(os.path.join(u, "summary.json"), {"rate": 0.4 if s == 1 else 0.41, "params_before": 400000, "params_after": 150000,
                                                 "macs_before": 9000000, "macs_after": 3000000, "finetune_epochs": epochs})
        write(os.path.join(u, "final_tuned.test.json"), {"test_accuracy": acc})
        write(os.path.join(u, "final_tuned.seconds"), "700")
    rec = str(tmp_path / "record")
    table = report(out, "--record", rec)
    rows = {line.split(" | ")[1]: line for line in table.splitlines() if line.startswith("| CNN")}
    eq = rows["uniform rate 0.4, 0.41, the loop's epochs"]
    assert "93.00 → 92.98 ± 0.03" in eq and "19 ± 4 (search + final)" in eq and "| 2 |" in eq
    # seed 1: 93.10 - 92.60 = +0.50 and 93.10 - 93.00 = +0.10; seed 2: 92.90 - 92.70 = +0.20 and 92.90 - 92.96 = -0.06
    assert "loop − uniform rate at the same final fine-tuning: seed 1 +0.50, seed 2 +0.20; mean 0.35 ± 0.21 points" in table
    assert "loop − uniform rate at the same total epochs: seed 1 +0.10, seed 2 -0.06; mean 0.02 ± 0.11 points" in table
    assert os.path.exists(os.path.join(rec, "cnn", "uniform-eq-s2", "summary.json"))
    assert report(rec) == table


def test_record_keeps_the_iterations_of_an_unfinished_loop(tmp_path):
    """A loop still running when the record is made: the record keeps the iterations its state.json
    holds (not the one in progress) as loop-s<s>/log.json alone, for STUDY_REPLAY, and
    what the record held for that seed before (a finished shorter run, say) is removed; the table
    made from the record leaves the seed out."""
    out = str(tmp_path / "study")
    make_study(out)
    run = os.path.join(out, "cnn", "loop-s4")
    entries = [{"iteration": 1, "accepted": False}, {"iteration": 2, "accepted": True}]
    # killed during iteration 3: its state says 2 iterations are done (a candidate of iteration 3 lies beside it)
    write(os.path.join(run, "state.json"), {"iteration": 3, "log": entries, "done": False})
    write(os.path.join(run, "it3", "prune.json"), {"iteration": 3})
    rec = str(tmp_path / "record")
    write(os.path.join(rec, "cnn", "loop-s4", "summary.json"), {"stale": True})
    write(os.path.join(rec, "cnn", "uniform-s4", "final_tuned.test.json"), {"stale": True})
    table = report(out, "--record", rec)
    assert json.load(open(os.path.join(rec, "cnn", "loop-s4", "log.json"))) == entries
    assert os.listdir(os.path.join(rec, "cnn", "loop-s4")) == ["log.json"]
    assert not os.path.exists(os.path.join(rec, "cnn", "uniform-s4"))
    assert not os.path.exists(os.path.join(rec, "cnn", "loop-s3"))  # nothing logged: nothing kept
    assert report(rec) == table


def test_no_study_is_an_error(tmp_path):
    for out in (tmp_path / "missing", tmp_path):  # no folder; a folder with no trained model
        p = report(str(out), check=False)
        assert p.returncode != 0 and "no trained model under" in p.stderr and str(out) in p.stderr
        assert not os.path.exists(os.path.join(out, "table.md"))


STUDY = os.path.join(ROOT, "studies", "prune", "run.sh")


def test_study_refuses_other_settings(tmp_path):
    """A study folder (a record copied into STUDY_OUT, say) made with other loop settings: the
    script stops before any work with one line naming the file and the differences, and leaves the
    folder as it was; a folder made with fewer iterations is continued (extension)."""
    d = tmp_path / "cnn"
    d.mkdir()
    old = {"iterations": 12, "finetune_epochs": 4, "accuracy_drop": 0.2, "final_epochs": 10, "seeds": "1", "ranks": 2}
    env = dict(os.environ, STUDY_OUT=str(tmp_path), HPCNN_BIN=str(tmp_path / "no-tools"), LOOP_EPOCHS_cnn="6")
    for settings, message in ((old, "finetune_epochs 4 -> 6"), (dict(old, iterations=20, finetune_epochs=6), "iterations 20 -> 12"),
                              ("{not json", "not readable as a study's settings")):
        text = settings if isinstance(settings, str) else json.dumps(settings)
        write(str(d / "settings.json"), text)
        p = subprocess.run(["bash", STUDY, "cnn"], env=env, capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 1, p.stderr
        assert str(d / "settings.json") in p.stderr and message in p.stderr, p.stderr
        assert (d / "settings.json").read_text() == text and sorted(os.listdir(d)) == ["settings.json"]
    # Same settings but fewer iterations: accepted (the check passes; the run then stops at the
    # missing tools, after writing the new settings).
    write(str(d / "settings.json"), json.dumps(dict(old, iterations=8, finetune_epochs=6)))
    p = subprocess.run(["bash", STUDY, "cnn"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert "other settings" not in p.stderr
    assert json.loads((d / "settings.json").read_text())["iterations"] == 12


def test_study_refuses_bad_settings(tmp_path):
    """A setting that is not a number of its kind stops the study before any work, naming the
    variable; nothing is written."""
    for var, value, message in (("LOOP_DROP_cnn", "abc", "LOOP_DROP (or LOOP_DROP_cnn) is 'abc': a number >= 0"),
                                ("LOOP_EPOCHS", "0", "LOOP_EPOCHS (or LOOP_EPOCHS_cnn) is '0': an integer >= 1"),
                                ("SEEDS", "1,2", "SEEDS is '1,2': a list of seeds"), ("RANKS", "two", "RANKS is 'two': an integer >= 1")):
        env = dict(os.environ, STUDY_OUT=str(tmp_path), HPCNN_BIN=str(tmp_path / "no-tools"), **{var: value})
        p = subprocess.run(["bash", STUDY, "cnn"], env=env, capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 1 and message in p.stderr, p.stderr
        assert not os.listdir(tmp_path / "cnn")


def test_study_replay_takes_the_seeds_a_record_finished(tmp_path):
    """STUDY_REPLAY=RECORD on an empty study folder: the record's base model and settings are
    copied in, the base's speed is measured, a seed the record finished at these settings is taken
    as it is (no loop, fine-tuning or baseline is run again), and the table lists it."""
    import hpcnn_test as H
    from test_dist_train import tiny_cnn
    rec, out = tmp_path / "rec", tmp_path / "out"
    d = rec / "cnn"
    d.mkdir(parents=True)
    tiny_cnn(d / "base.onnx")
    write(str(d / "settings.json"), {"iterations": 12, "finetune_epochs": 4, "accuracy_drop": 0.2, "final_epochs": 10, "seeds": "1", "ranks": 1})
    write(str(d / "loop-s1" / "summary.json"), {"params_before": 400000, "params_after": 200000, "macs_before": 9000000,
                                                  "macs_after": 4000000, "iterations": 3, "stopped_by": "no layer changes", "seconds": 900})
    write(str(d / "loop-s1" / "log.json"), [{"iteration": k, "finetune_epochs": 4} for k in (1, 2, 3)])
    write(str(d / "uniform-s1" / "summary.json"), {"rate": 0.5, "params_before": 400000, "params_after": 200000,
                                                     "macs_before": 9000000, "macs_after": 3000000})
    for run, acc in (("loop-s1", 0.9310), ("uniform-s1", 0.9250)):
        write(str(d / run / "final_tuned.test.json"), {"test_accuracy": acc})
        write(str(d / run / "final_tuned.seconds"), "300")
        write(str(d / run / "final_tuned.onnx.speed.json"), {"images_per_second": 2000.0, "test_accuracy": acc})
    env = dict(os.environ, STUDY_OUT=str(out), STUDY_REPLAY=str(rec), SEEDS="1", RANKS="1", HPCNN_BIN=H.BIN_DIR)
    p = subprocess.run(["bash", STUDY, "cnn"], env=env, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr
    assert f"seed 1: taken from {rec}/cnn" in p.stderr and "pruning loop" not in p.stderr and "fine-tuning" not in p.stderr
    assert (out / "cnn" / "base.onnx").read_bytes() == (d / "base.onnx").read_bytes()
    assert json.load(open(out / "cnn" / "base.onnx.speed.json"))["images_per_second"] > 0
    table = (out / "table.md").read_text()
    assert "| CNN | automatic rates (loop) | 400,000 → 200,000 (−50.0%) |" in table and "93.10" in table
    # UNIFORM_BUDGET=equal adds the uniform rate fine-tuned for the loop's 12 search + 10 final
    # epochs (2 steps each here: a smoke test of the step, not a result), and its row.
    p = subprocess.run(["bash", STUDY, "cnn"], env=dict(env, UNIFORM_BUDGET="equal", STUDY_MAX_STEPS="2"), capture_output=True,
                       text=True, cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stderr
    assert "uniform baseline at the loop's budget (12 search + 10 final epochs), seed 1" in p.stderr, p.stderr
    eq = out / "cnn" / "uniform-eq-s1"
    assert json.load(open(eq / "summary.json"))["finetune_epochs"] == 22
    assert json.load(open(eq / "final_tuned.json"))["epochs_run"] == 22
    assert json.load(open(eq / "prune.json"))["uniform_rate"] == 0.5
    table = (out / "table.md").read_text()
    assert "| CNN | uniform rate 0.5, the loop's epochs |" in table and "| 22 (search + final) |" in table, table
    assert "loop − uniform rate at the same total epochs: seed 1" in table


def test_study_replay_refuses_a_record_of_other_settings(tmp_path):
    """STUDY_REPLAY=RECORD whose settings differ from this run's (or a folder that is no record):
    an error naming the record's file and the difference, and nothing copied or written."""
    rec, out = tmp_path / "rec", tmp_path / "out"
    write(str(rec / "cnn" / "base.onnx"), "not read")
    write(str(rec / "cnn" / "settings.json"), {"iterations": 12, "finetune_epochs": 4, "accuracy_drop": 0.6, "final_epochs": 10,
                                               "seeds": "1", "ranks": 2})
    env = dict(os.environ, STUDY_OUT=str(out), STUDY_REPLAY=str(rec), HPCNN_BIN=str(tmp_path / "no-tools"))
    p = subprocess.run(["bash", STUDY, "cnn"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 1 and f"{rec}/cnn/settings.json was made with other settings" in p.stderr and "accuracy_drop 0.6 -> 0.2" in p.stderr, p.stderr
    assert not (out / "cnn").exists() or not os.listdir(out / "cnn")
    p = subprocess.run(["bash", STUDY, "cnn"], env=dict(env, STUDY_REPLAY=str(tmp_path / "none")), capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 1 and "STUDY_REPLAY: no" in p.stderr, p.stderr
    assert not (out / "cnn").exists() or not os.listdir(out / "cnn")
