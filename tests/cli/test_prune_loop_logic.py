"""scripts/prune_loop.py's logic without the tools: the accept/reject rule, the bound U that follows,
the repeated-candidate rule, the replay checks, the state file, and the loop's course driven by
scripted prune-rate reports and fine-tuning results (a fake of the two tools). The runs of the real
tools are in test_prune_loop.py."""
import argparse
import importlib.util
import json
import os

import pytest

spec = importlib.util.spec_from_file_location(
    "prune_loop", os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "prune_loop.py"))
L = importlib.util.module_from_spec(spec)
spec.loader.exec_module(L)


def report(kept, params_after, u=1.0, pruned_any=True, loss=0.5):
    """A prune-rate report as the loop reads it: one prunable group per entry of kept."""
    return {"totals": {"params_before": 1000, "params_after": params_after, "macs_before": 10, "macs_after": 5},
            "data_driven": {"loss": loss, "loss_before": loss, "pruned_any": pruned_any,
                            "upper_bound": {"used": u, "limit": 1.0, "next_if_accepted": min(2 * u, 1.0), "next_if_rejected": u / 2 - 0.1}},
            "groups": [{"layers": [f"c{k}"], "kept_channels": n, "rate": 1 - n / 8, "prunable": True} for k, n in enumerate(kept)]}


def test_accept_rule_is_strict_and_relative_to_the_original():
    goal = L.goal_of(90.0, 0.5)
    assert goal == pytest.approx(0.895, abs=1e-15)
    assert L.accepted(89.6, goal) and not L.accepted(89.4, goal)
    assert not L.accepted(goal * 100, goal)  # equal is not above
    assert L.goal_of(90.0, -1) == pytest.approx(0.91)  # a negative drop asks for a gain
    assert L.early_stop_of(0.895) == 0.895 and L.early_stop_of(1.01) == 0 and L.early_stop_of(-0.2) == 0


def test_next_bound_and_signature():
    r = report([4, 6], 500, u=0.4)
    assert L.next_bound(r, True) == 0.8 and L.next_bound(r, False) == pytest.approx(0.1)
    assert L.signature(r) == L.signature(report([4, 6], 500, u=0.2)) != L.signature(report([4, 5], 480))
    assert L.kept_channels(r) == {"c0": 4, "c1": 6}


def test_replay_step():
    log = [{"iteration": 1, "accepted": False, "params_after": 500, "kept_channels": {"c0": 4}, "validation_accuracy": 0.8,
            "finetune_epochs": 2, "finetune_seconds": 30.5},
           {"iteration": 2, "accepted": True, "params_after": 600, "kept_channels": {"c0": 5}, "validation_accuracy": 0.9,
            "finetune_epochs": 1, "finetune_seconds": 10}]
    assert L.replay_step(log, 1, report([4], 500)) == {"validation_accuracy": 0.8, "epochs_run": 2, "seconds": 30.5}
    assert L.replay_step(log, 2, report([5], 600)) == "check"
    assert L.replay_step(log, 3, report([3], 100)) is None
    for bad in (report([4], 501), report([5], 500)):
        with pytest.raises(L.LoopError, match="diverged: iteration 1:"):
            L.replay_step(log, 1, bad)
    L.check_replayed_accuracy(log, 2, 90.0)
    with pytest.raises(L.LoopError, match="iteration 2: validation accuracy 89.98"):
        L.check_replayed_accuracy(log, 2, 89.98)  # one sample of 5,000 apart
    assert L.check_log(log) and not L.check_log(log[1:]) and not L.check_log({"iteration": 1}) and L.check_log([])


def state(tmp_path, **kw):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    s = {"iteration": 2, "current": str(model), "loss_before": 0.5, "bound": 0.25, "stop": "iteration limit", "repeats": 0,
         "elapsed": 12.5, "acc_before": 90.0, "goal": 0.895, "early": 0.895, "lr": "0.001", "done": False,
         "rejected": {"4-6": 1}, "log": [{"iteration": 1}]}
    s.update(kw)
    return s


def test_state_file_round_trip_and_refusals(tmp_path):
    s = state(tmp_path)
    L.save_state(str(tmp_path), s)
    assert L.load_state(str(tmp_path)) == s
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "state.json"]  # written through a temporary, renamed
    for bad, field in (({"iteration": "2"}, "iteration"), ({"repeats": True}, "repeats"), ({"lr": 0.001}, "lr"),
                       ({"log": [{"iteration": 2}]}, "log"), ({"iteration": 0}, "log")):
        L.save_state(str(tmp_path), state(tmp_path, **bad))
        with pytest.raises(L.LoopError, match=f"not a loop state this program wrote \\(fields {field}"):
            L.load_state(str(tmp_path))
    L.save_state(str(tmp_path), state(tmp_path, current=str(tmp_path / "gone.onnx")))
    with pytest.raises(L.LoopError, match="gone.onnx', is gone"):
        L.load_state(str(tmp_path))
    (tmp_path / "state.json").write_text("{")
    with pytest.raises(L.LoopError, match="is not readable JSON"):
        L.load_state(str(tmp_path))
    (tmp_path / "state.json").unlink()
    (tmp_path / "state.sh").write_text("declare -- i=1\n")
    with pytest.raises(L.LoopError, match="no state.json.*bash prune_loop.sh"):
        L.load_state(str(tmp_path))
    assert L.options_diff({"a": 1, "b": "x"}, {"a": 1, "b": "y"}) == ["b 'x' -> 'y'"]


class FakeTools:
    """prune-rate and dist-train as the loop calls them, from scripts: the kept channels of each
    prune-rate run (None: no layer changes) and the validation accuracy of each fine-tuning."""

    def __init__(self, candidates, accuracies):
        self.candidates, self.accuracies = list(candidates), list(accuracies)
        self.prunes, self.finetunes = [], []

    def prune(self, model, args, report_path):
        u = float(args[args.index("--upper-bound") + 1]) if "--upper-bound" in args else 1.0
        kept = self.candidates.pop(0)
        self.prunes.append((model, u))
        out = args[args.index("-o") + 1]
        open(out, "w").close()
        L.write_json(report_path, report(kept or [8], 1000 - 10 * sum(8 - k for k in kept or [8]), u=u, pruned_any=kept is not None))

    def dist(self, args, stdout):
        self.finetunes.append(args[args.index("--model") + 1])
        open(args[args.index("-o") + 1], "w").close()
        L.write_json(stdout, {"validation_accuracy": self.accuracies.pop(0), "epochs_run": 1, "seconds": 3.0})


def run_loop(tmp_path, tools, iterations, replay=None):
    out = str(tmp_path / "loop")
    os.makedirs(out, exist_ok=True)
    args = argparse.Namespace(iterations=iterations, finetune_epochs=1)
    s = state(tmp_path, iteration=1, current=str(tmp_path / "m.onnx"), loss_before=None, bound=None, rejected={}, log=[], elapsed=0)
    L.iterate(args, tools, out, s, 0, replay, 0.0)
    return s


def test_loop_course_accept_reject_and_repeated_candidates(tmp_path):
    """accept (U doubles, the tuned model goes on), reject (U shrinks, the model stays), the same
    candidate again under the smaller U: rejected without fine-tuning and not counted, then a new
    candidate accepted; the iteration limit ends it."""
    tools = FakeTools([[6], [4], [4], [5], [3]], [0.95, 0.80, 0.93, 0.99])
    s = run_loop(tmp_path, tools, iterations=3)
    log = s["log"]
    assert [e["accepted"] for e in log] == [True, False, True] and [e["iteration"] for e in log] == [1, 2, 3]
    assert s["repeats"] == 1 and s["stop"] == "iteration limit" and s["iteration"] == 4
    assert [u for _, u in tools.prunes] == [1.0, 1.0, pytest.approx(0.4), pytest.approx(0.1)]  # 1 -> accepted 1 -> rejected 0.4 -> again 0.1
    assert log[1]["upper_bound_next"] == pytest.approx(0.4) and log[2]["upper_bound"] == pytest.approx(0.1)
    assert s["current"].endswith(os.path.join("it3", "tuned.onnx")) and s["rejected"] == {}
    assert tools.prunes[1][0].endswith(os.path.join("it1", "tuned.onnx"))  # the accepted model went on
    assert len(tools.finetunes) == 3 and tools.candidates == [[3]]  # the repeat was never fine-tuned
    assert s["loss_before"] == 0.5


def test_loop_ends_when_nothing_changes_or_the_bound_drops_below_zero(tmp_path):
    s = run_loop(tmp_path / "a", FakeTools([[6], None], [0.99]), iterations=5)
    assert s["stop"] == "no layer changes" and len(s["log"]) == 1 and s["iteration"] == 2
    assert not os.path.exists(tmp_path / "a" / "loop" / "it2" / "candidate.onnx")
    # Rejections: U = 1 -> 0.4 -> 0.1 -> -0.05 < 0 ends the loop after the third.
    s = run_loop(tmp_path / "b", FakeTools([[6], [5], [4]], [0.1, 0.1, 0.1]), iterations=9)
    assert s["stop"] == "upper bound below 0" and [e["accepted"] for e in s["log"]] == [False] * 3 and s["iteration"] == 3


def test_loop_replays_rejections_without_fine_tuning(tmp_path):
    ref = run_loop(tmp_path / "ref", FakeTools([[6], [5]], [0.1, 0.99]), iterations=2)["log"]
    tools = FakeTools([[6], [5], [4]], [0.99, 0.5])
    s = run_loop(tmp_path / "re", tools, iterations=3, replay=ref)
    strip = lambda log: [{k: v for k, v in e.items() if k not in ("current_model", "replayed")} for e in log]  # noqa: E731
    assert strip(s["log"][:2]) == strip(ref) and s["log"][0]["replayed"] and "replayed" not in s["log"][1]
    assert len(tools.finetunes) == 2  # iteration 1 taken from the log; 2 (accepted) and 3 (past the log) fine-tuned
    with pytest.raises(L.LoopError, match="diverged: iteration 1"):
        run_loop(tmp_path / "bad", FakeTools([[7]], []), iterations=1, replay=ref)


def test_state_is_saved_at_the_start_of_each_iteration(tmp_path):
    """What --resume reads after a kill during iteration 2: the log of iteration 1 alone."""
    class Killed(Exception):
        pass

    tools = FakeTools([[6], [5]], [0.99])
    real_dist = tools.dist

    def dist(args, stdout):
        if len(tools.finetunes) == 1:
            raise Killed
        real_dist(args, stdout)
    tools.dist = dist
    with pytest.raises(Killed):
        run_loop(tmp_path, tools, iterations=3)
    saved = json.load(open(tmp_path / "loop" / "state.json"))
    assert saved["iteration"] == 2 and [e["iteration"] for e in saved["log"]] == [1] and not saved["done"]
    assert saved["current"].endswith(os.path.join("it1", "tuned.onnx"))


# ---- regression (the configuration's "task": "regression"): the validation MAE decides ----

def test_regression_accept_rule_is_relative_to_the_original_mae():
    limit = L.mae_limit_of(0.4, 0.05)
    assert limit == pytest.approx(0.42, abs=1e-15)
    assert L.accepted_mae(0.41, limit) and L.accepted_mae(limit, limit)  # at most the limit: equal passes
    assert not L.accepted_mae(0.4201, limit)
    assert L.mae_limit_of(0.4, -0.5) == pytest.approx(0.2)  # a negative increase asks for a smaller MAE


class FakeRegressionTools(FakeTools):
    """The fake tools of a regression run: each fine-tuning's validation MAE (and MSE) in place of
    its accuracy; no stop_at_validation_accuracy is passed."""

    def dist(self, args, stdout):
        assert not any(a.startswith("stop_at_validation_accuracy") for a in args)
        self.finetunes.append(args[args.index("--model") + 1])
        open(args[args.index("-o") + 1], "w").close()
        mae = self.accuracies.pop(0)
        L.write_json(stdout, {"validation_mae": mae, "validation_mse": mae * mae, "epochs_run": 1, "seconds": 3.0})


def regression_state(tmp_path, **kw):
    s = state(tmp_path, iteration=1, current=str(tmp_path / "m.onnx"), loss_before=None, bound=None, rejected={}, log=[],
              elapsed=0, goal=L.mae_limit_of(0.4, 0.05), early=0)
    del s["acc_before"]
    s.update(task="regression", mae_before=0.4, **kw)
    return s


def test_regression_loop_course(tmp_path):
    """MAE 0.41 (<= 0.42: accepted, U doubles), 0.43 (rejected), the same candidate again (rejected
    without fine-tuning), 0.42 (equal to the limit: accepted); the log carries validation_mae and
    validation_mse, no accuracy."""
    out = str(tmp_path / "loop")
    os.makedirs(out)
    tools = FakeRegressionTools([[6], [4], [4], [5]], [0.41, 0.43, 0.42])
    s = regression_state(tmp_path)
    L.iterate(argparse.Namespace(iterations=3, finetune_epochs=1), tools, out, s, 0, None, 0.0)
    log = s["log"]
    assert [e["accepted"] for e in log] == [True, False, True] and s["repeats"] == 1
    assert [e["validation_mae"] for e in log] == [0.41, 0.43, 0.42]
    assert log[0]["validation_mse"] == pytest.approx(0.41 ** 2) and not any("validation_accuracy" in e for e in log)
    assert s["current"].endswith(os.path.join("it3", "tuned.onnx")) and len(tools.finetunes) == 3
    # Its state round-trips through state.json (mae_before in place of acc_before).
    L.save_state(out, s)
    assert L.load_state(out) == s
    bad = dict(s)
    del bad["mae_before"]
    L.save_state(out, bad)
    with pytest.raises(L.LoopError, match="fields mae_before"):
        L.load_state(out)


def test_regression_replay(tmp_path):
    out = str(tmp_path / "ref")
    os.makedirs(out)
    ref = regression_state(tmp_path)
    L.iterate(argparse.Namespace(iterations=2, finetune_epochs=1), FakeRegressionTools([[6], [5]], [0.5, 0.41]), out, ref, 0, None, 0.0)
    log = ref["log"]
    assert [e["accepted"] for e in log] == [False, True]
    assert L.replay_step(log, 1, report([6], 980), regression=True) == {"validation_mae": 0.5, "validation_mse": 0.25,
                                                                         "epochs_run": 1, "seconds": 3.0}
    L.check_replayed_mae(log, 2, 0.41)
    with pytest.raises(L.LoopError, match="iteration 2: validation MAE 0.4100001"):
        L.check_replayed_mae(log, 2, 0.4100001)
    L.check_replay_task(log, True)
    with pytest.raises(L.LoopError, match="no validation_accuracy \\(it has validation_mae: a regression run's log\\)"):
        L.check_replay_task(log, False)
    out = str(tmp_path / "re")
    os.makedirs(out)
    tools = FakeRegressionTools([[6], [5]], [0.41])
    s = regression_state(tmp_path)
    L.iterate(argparse.Namespace(iterations=2, finetune_epochs=1), tools, out, s, 0, log, 0.0)
    assert [e["validation_mae"] for e in s["log"]] == [0.5, 0.41] and s["log"][0]["replayed"] and len(tools.finetunes) == 1
