#!/usr/bin/env python3
"""The automatic pruning loop of Sakai et al. ("Automatic pruning rate derivation for structured
pruning of deep neural networks", ICPR 2022; Sakai, Eto, Teranishi, JAIT 13(3), 2022; the authors'
auto_prune() in FujitsuResearch/automatic_pruning) over the hpcnn tools:

  scripts/prune_loop.py MODEL --config TRAIN.json --out DIR [options]

Each iteration: prune-rate derives per-layer rates from the current model's loss and connection
sensitivity (data-driven thresholds, bound U) and writes the smaller model -> dist-train fine-tunes
it (fresh optimizer and learning-rate schedule, stopping after the first epoch whose validation
accuracy exceeds the original model's minus the allowed drop) -> accept (the tuned model is the new
current model; U grows) or reject (the current model stays; U shrinks). The loop ends when no layer
would change any more, when U < 0, or after --iterations. A candidate identical to one already
rejected for the same current model (U shrank but no rate changed) is rejected again without
fine-tuning: it would train to the same weights.

Regression (the configuration's "task": "regression", dist-train's float targets and MSE loss): the
measure is the validation mean absolute error (MAE) instead of the accuracy. The original model's
validation MAE is measured; a candidate is accepted when its fine-tuned validation MAE is at most
that times (1 + --mae-increase). Fine-tuning runs all its epochs (stop_at_validation_accuracy is a
classification option). The log, summary.json and --replay carry validation_mae / validation_mse
(and test_mae / test_mse in the summary, before and after) where classification carries accuracies.

Validation split: the last --validation N (default 5000) of the training images, held out from
every fine-tuning (dist-train's data.validation_samples); the model being pruned should have been
trained with the same split held out. Test data are not used inside the loop: the final model's
test accuracy is measured once, at the end.

Options:
  --config FILE          dist-train configuration (data, augmentation, optimizer) [required]
  --out DIR              output folder (created; refuses a non-empty one unless -f)   [required]
  --iterations K         at most K iterations (default 10)
  --ranks N              ranks of every tool run under mpirun (default 2; 1: no mpirun)
  --finetune-epochs E    epochs of fine-tuning per iteration at most (default 3)
  --finetune-lr LR       peak learning rate of fine-tuning (default: the config's lr.base / 10),
                         cosine decay, no warm-up, no Final Polishing
  --accuracy-drop A      allowed drop of validation accuracy in points (default 0.1; the authors'
                         acc_control; negative: a gain is required); classification only
  --mae-increase R       regression: allowed relative increase of the validation MAE (default 0.05:
                         a candidate's MAE may be at most 5% above the original model's; > -1)
  --validation N         validation samples held out of the training set (default 5000)
  --margin M             loss margin of the thresholds (default 0.1)
  --batches B            batches of the loss and sensitivity (default 100, batch 128)
  --keep LAYERS          comma-separated layers never pruned (prune-rate --keep), e.g. the FC layer
                         sparsify-fcl replaces next; may be repeated
  --seed S               seed of fine-tuning (default: the config's)
  -f                     reuse a non-empty --out
  --resume               continue an interrupted run in --out (implies -f): the iterations already
                         done are kept (DIR/state.json, written atomically at the start of every
                         iteration and after the last, holds the loop's state and log), the
                         interrupted iteration reuses its prune report and candidate, and its
                         fine-tuning continues from its checkpoint (DIR/it<i>/ckpt, written every
                         epoch). A finished run that stopped at its iteration limit goes on with a
                         larger --iterations K. Every option but --iterations must be the one the
                         run started with (DIR/options.json is checked).
  --replay LOG           rebuild a run from its log.json (e.g. a study record, when the run's folder
                         is lost): the first len(LOG) iterations are run again, each candidate
                         checked against LOG (parameters, kept channels); a rejected one is not
                         fine-tuned (LOG's validation accuracy is taken), an accepted one is
                         fine-tuned again (its model is needed) and its validation accuracy must
                         equal LOG's; any difference stops the run (the same options, ranks and
                         tools give the same result bit for bit). Later iterations run as usual.
                         Their log entries say "replayed": true, and summary.json's seconds count
                         the skipped fine-tunings at LOG's durations: the loop's cost, not the
                         replay's.
Environment: HPCNN_BIN (a build's tools/ or an installed bin/; default: this repository's
build/tools when built, else the tools on PATH: scripts/hpcnn_tools.py), MPIRUN.

Outputs in DIR: final.onnx (the last accepted model, or a copy of MODEL), log.json (one entry per
iteration: rates, parameters, MACs, loss, validation accuracy (regression: validation_mae and
validation_mse), U, accepted), summary.json (before and after: parameters, MACs, validation and
test accuracy (regression: "task": "regression", validation_mae_before/after, validation_mae_limit,
validation_mse_*, test_mae_*, test_mse_*, test_mae_per_target_*), iterations, wall time; also
printed on standard output), and per iteration it<i>/ with the prune report, the candidate, the fine-tuned
model and its metrics. Exit status 0 on success, 1 on any error (named on standard error, prefixed
"prune_loop: error:"), 2 on a command-line error.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpcnn_tools  # noqa: E402 (beside this file)

STATE_FIELDS = {  # the loop's state (DIR/state.json): name -> the types it may have
    "iteration": (int,), "current": (str,), "loss_before": (float, type(None)), "bound": (float, type(None)),
    "stop": (str,), "repeats": (int,), "elapsed": (int, float), "acc_before": (float,), "goal": (float,),
    "early": (float, int), "lr": (str,), "done": (bool,), "rejected": (dict,), "log": (list,),
}
# A regression run's state: the original model's validation MAE in place of its accuracy, and goal
# the largest MAE accepted.
REGRESSION_STATE_FIELDS = {**{k: v for k, v in STATE_FIELDS.items() if k != "acc_before"},
                           "task": (str,), "mae_before": (float,)}


class LoopError(Exception):
    """An error the loop reports as 'prune_loop: error: ...' with exit status 1."""


# ---- the accept/reject logic (pure functions, unit-tested in tests/cli/test_prune_loop_logic.py) ----

def goal_of(acc_before_percent, drop_points):
    """The validation accuracy (a fraction) a candidate must exceed: the original model's minus the
    allowed drop (the authors' acc_control), compared with the original every time."""
    return (acc_before_percent - drop_points) / 100


def early_stop_of(goal):
    """dist-train's stop_at_validation_accuracy takes a fraction in (0, 1); 0 turns it off."""
    return goal if 0 < goal < 1 else 0


def accepted(acc_percent, goal):
    """Accepted when the fine-tuned candidate's validation accuracy exceeds the goal (strictly)."""
    return acc_percent / 100 > goal


def mae_limit_of(mae_before, increase):
    """Regression: the largest validation MAE a candidate may have, the original model's times
    (1 + the allowed relative increase), compared with the original every time."""
    return mae_before * (1 + increase)


def accepted_mae(mae, limit):
    """Regression: accepted when the fine-tuned candidate's validation MAE is at most the limit."""
    return mae <= limit


def next_bound(report, is_accepted):
    """The bound U of the next iteration, as prune-rate's report computed it for either outcome."""
    u = report["data_driven"]["upper_bound"]
    return u["next_if_accepted"] if is_accepted else u["next_if_rejected"]


def signature(report):
    """The candidate's kept channels per group: equal signatures for the same current model are the
    same candidate (it would fine-tune to the same weights)."""
    return "-".join(str(g["kept_channels"]) for g in report["groups"])


def kept_channels(report):
    return {g["layers"][0]: g["kept_channels"] for g in report["groups"] if g["prunable"]}


def replay_step(log, i, report, regression=False):
    """What --replay does at iteration i (1-based) of LOG for a candidate with this prune report:
    None past the log's end (run as usual); "check" for an accepted entry (fine-tune again, then
    check_replayed_accuracy or check_replayed_mae); for a rejected entry, the fine-tuning's result as
    logged (a dict like dist-train's summary: validation_accuracy (regression: validation_mae and
    validation_mse), epochs_run, seconds). Raises LoopError when the
    candidate is not the one logged."""
    if i > len(log):
        return None
    e = log[i - 1]
    kept = kept_channels(report)
    if report["totals"]["params_after"] != e["params_after"] or kept != e["kept_channels"]:
        raise LoopError(f"--replay diverged: iteration {i}: the candidate has {report['totals']['params_after']} parameters "
                        f"(kept channels {kept}), the log {e['params_after']} ({e['kept_channels']}): not the same options, "
                        "tools or model")
    if e["accepted"]:
        return "check"
    if regression:
        return {"validation_mae": e["validation_mae"], "validation_mse": e["validation_mse"], "epochs_run": e["finetune_epochs"],
                "seconds": e["finetune_seconds"]}
    return {"validation_accuracy": e["validation_accuracy"], "epochs_run": e["finetune_epochs"], "seconds": e["finetune_seconds"]}


def check_replay_task(log, regression):
    """A --replay log must come from a run of the same task (its entries' measure)."""
    want, other = ("validation_mae", "validation_accuracy") if regression else ("validation_accuracy", "validation_mae")
    bad = next((e["iteration"] for e in log if want not in e or (regression and "validation_mse" not in e)), None)
    if bad is not None:
        raise LoopError(f"--replay: iteration {bad} of the log has no {want}"
                        + (f" (it has {other}: a {'classification' if regression else 'regression'} run's log)"
                           if other in log[bad - 1] else "") + f"; this run is a {'regression' if regression else 'classification'} one")


def check_replayed_mae(log, i, mae):
    """Regression: an accepted iteration fine-tuned again must reach the logged validation MAE (the
    same computation: equal up to the last bits of its JSON text)."""
    want = log[i - 1]["validation_mae"]
    if abs(mae - want) > 1e-12 * max(abs(want), 1e-300):
        raise LoopError(f"--replay: iteration {i}: validation MAE {mae!r} after fine-tuning, the log says {want!r}: "
                        "not the same options, tools or ranks")


def check_replayed_accuracy(log, i, acc_percent):
    """An accepted iteration fine-tuned again must reach the logged validation accuracy exactly (a
    count over the validation split: equal, or at least one sample apart)."""
    want = log[i - 1]["validation_accuracy"] * 100
    if abs(acc_percent - want) >= 1e-9:
        raise LoopError(f"--replay: iteration {i}: validation accuracy {acc_percent}% after fine-tuning, the log says {want}%: "
                        "not the same options, tools or ranks")


def log_entry(i, report, finetune, is_accepted, acc_percent, bound_next, current, replayed, regression=False):
    """One iteration's record; acc_percent is the validation accuracy in percent (regression: None,
    the fine-tuning's validation_mae and validation_mse are recorded in its place)."""
    d = report["data_driven"]
    e = {"iteration": i, "accepted": is_accepted,
         "params_before": report["totals"]["params_before"], "params_after": report["totals"]["params_after"],
         "macs_before": report["totals"]["macs_before"], "macs_after": report["totals"]["macs_after"],
         "loss_before": d["loss_before"], "loss": d["loss"], "upper_bound": d["upper_bound"]["used"],
         "upper_bound_next": float(bound_next),
         **({"validation_mae": finetune["validation_mae"], "validation_mse": finetune["validation_mse"]} if regression
            else {"validation_accuracy": acc_percent / 100}),
         "finetune_epochs": finetune["epochs_run"], "finetune_seconds": finetune["seconds"],
         "rates": {g["layers"][0]: g["rate"] for g in report["groups"] if g["prunable"]},
         "kept_channels": kept_channels(report), "current_model": current}
    if replayed:
        e["replayed"] = True
    return e


def check_log(log):
    """A loop's log.json: a list of entries numbered 1, 2, ..."""
    return isinstance(log, list) and all(isinstance(e, dict) and e.get("iteration") == k + 1 for k, e in enumerate(log))


# ---- files ----

def write_json(path, value):
    """Written atomically: a reader (or a resumed run) sees the old file or the new one, whole."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise LoopError(f"{what} '{path}' is not readable JSON ({e})") from None


def save_state(out, state):
    write_json(os.path.join(out, "state.json"), state)


def load_state(out):
    """DIR/state.json as save_state wrote it, its fields checked (LoopError otherwise)."""
    path = os.path.join(out, "state.json")
    if not os.path.exists(path):
        old = " (a state.sh: a run of the bash prune_loop.sh this program replaced; start it over)" \
            if os.path.exists(os.path.join(out, "state.sh")) else ""
        raise LoopError(f"--resume: '{out}' holds no interrupted run (no state.json){old}")
    state = read_json(path, "--resume: the loop state")
    fields = REGRESSION_STATE_FIELDS if isinstance(state, dict) and state.get("task") == "regression" else STATE_FIELDS
    bad = [k for k, types in fields.items()
           if not isinstance(state, dict) or k not in state or not isinstance(state[k], types)
           or (isinstance(state[k], bool) and bool not in types)]
    if bad or state["iteration"] < 1 or not check_log(state["log"]):
        raise LoopError(f"--resume: '{path}' is not a loop state this program wrote (fields {', '.join(bad) or 'log'})")
    if not os.path.isfile(state["current"]):
        raise LoopError(f"--resume: the current model of '{path}', '{state['current']}', is gone")
    return state


def options_diff(old, new):
    """The options a resumed run must share with the run it continues (all but --iterations)."""
    return [f"{k} {old.get(k)!r} -> {new[k]!r}" for k in new if old.get(k) != new[k]]


# ---- the tools ----

class Tools:
    def __init__(self, args, out):
        try:
            self.prune_rate = hpcnn_tools.tool("prune-rate")
            self.dist_train = hpcnn_tools.tool("dist-train")
        except hpcnn_tools.ToolNotFound as e:
            raise LoopError(str(e)) from None
        self.args, self.out = args, out
        self.launch = hpcnn_tools.launch(args.ranks)
        self.env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        self.common = ["--set", f"data.validation_samples={args.validation}"]
        if args.seed is not None:
            self.common += ["--set", f"seed={args.seed}"]

    def run(self, argv, stdout):
        """Runs a tool (its errors on our standard error); a failure stops the loop."""
        with open(stdout, "w") if isinstance(stdout, str) else open(os.devnull, "w") as f:
            r = subprocess.run(argv, stdout=f, env=self.env)
        if r.returncode != 0:
            raise LoopError(f"{os.path.basename(argv[len(self.launch)] if self.launch else argv[0])} failed "
                            f"(exit {r.returncode}): {' '.join(argv)}")

    def dist(self, args, stdout):
        self.run([*self.launch, self.dist_train, "--config", self.args.config, *self.common, *args], stdout)

    def prune(self, model, args, report):
        self.run([*self.launch, self.prune_rate, "--config", self.args.config, "--margin", self.args.margin,
                  "--batches", str(self.args.batches), *self.keep_args(), model, *args, "--report", report], None)

    def keep_args(self):
        return ["--keep", ",".join(self.args.keep)] if self.args.keep else []

    def evaluate(self, model, split):
        """The model's accuracy on the split, in percent."""
        path = os.path.join(self.out, ".eval.json")
        self.dist(["--evaluate", model, "--split", split], path)
        return read_json(path, "dist-train --evaluate's output")[f"{split}_accuracy"] * 100

    def evaluate_regression(self, model, split):
        """Regression: the model's mse, mae and mae_per_target on the split (dist-train --evaluate)."""
        path = os.path.join(self.out, ".eval.json")
        self.dist(["--evaluate", model, "--split", split], path)
        e = read_json(path, "dist-train --evaluate's output")
        return {k: e[k] for k in ("mse", "mae", "mae_per_target")}

    def costs(self, model):
        """Parameters and MACs of a model as prune-rate counts them."""
        r = subprocess.run([self.prune_rate, model, "--rate", "0"], stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise LoopError(f"prune-rate failed on '{model}' (exit {r.returncode})")
        return json.loads(r.stdout)["totals"]

    def default_lr(self):
        r = subprocess.run([self.dist_train, "--config", self.args.config, "--print-config"], stdout=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise LoopError(f"dist-train --print-config failed on '{self.args.config}' (exit {r.returncode})")
        return repr(json.loads(r.stdout)["lr"]["base"] / 10)


# ---- the loop ----

def say(text):
    print(f"prune_loop: {text}", file=sys.stderr, flush=True)


def start(args, tools, out):
    """A fresh run's state: the original model's validation accuracy and the goal (regression: its
    validation MAE and the largest MAE accepted)."""
    original = os.path.join(out, "original.onnx")
    shutil.copyfile(args.model, original)
    if args.task == "regression":
        mae_before = float(tools.evaluate_regression(original, "validation")["mae"])
        goal = mae_limit_of(mae_before, float(args.mae_increase))
        say(f"original validation MAE {mae_before!r}; a candidate is accepted at or below {goal!r}")
        return {"iteration": 1, "current": original, "loss_before": None, "bound": None, "stop": "iteration limit",
                "repeats": 0, "elapsed": 0, "task": "regression", "mae_before": mae_before, "goal": goal, "early": 0,
                "lr": args.finetune_lr or tools.default_lr(), "done": False, "rejected": {}, "log": []}
    acc_before = tools.evaluate(original, "validation")
    goal = goal_of(acc_before, float(args.accuracy_drop))
    say(f"original validation accuracy {acc_before}%; a candidate is accepted above {goal * 100}%")
    return {"iteration": 1, "current": original, "loss_before": None, "bound": None, "stop": "iteration limit",
            "repeats": 0, "elapsed": 0, "acc_before": acc_before, "goal": goal, "early": early_stop_of(goal),
            "lr": args.finetune_lr or tools.default_lr(), "done": False, "rejected": {}, "log": []}


def resume(args, out, s):
    """The state s of an interrupted run, or of a finished one to extend to more iterations."""
    summary = os.path.join(out, "summary.json")
    if os.path.exists(summary):
        if s["stop"] != "iteration limit" or args.iterations < s["iteration"]:
            raise LoopError(f"--resume: the run in '{out}' has finished (stopped by: {s['stop']}, after {s['iteration'] - 1} "
                            "iterations); only a run stopped by its iteration limit goes on, with a larger --iterations")
        s["done"] = False
        os.remove(summary)
    say(f"resuming {'after the last iteration' if s['done'] else 'at iteration ' + str(s['iteration'])} (current model {s['current']})")
    return s


def iterate(args, tools, out, s, resume_at, replay_log, t0):
    """Runs iterations until the loop ends; s is updated in place and saved at the start of each.
    Returns t0, moved back by the fine-tunings a replay skipped."""
    while not s["done"] and s["iteration"] <= args.iterations:
        i = s["iteration"]
        s["elapsed"] = time.monotonic() - t0
        save_state(out, s)
        d = os.path.join(out, f"it{i}")
        os.makedirs(d, exist_ok=True)
        report_path, candidate = os.path.join(d, "prune.json"), os.path.join(d, "candidate.onnx")
        # An interrupted iteration keeps its prune report and candidate (both written atomically,
        # the report last); a fresh one removes what an earlier run may have left there.
        if i != resume_at or not os.path.isfile(report_path) or not os.path.isfile(candidate):
            for f in ("ckpt", "prune.json"):
                if os.path.exists(os.path.join(d, f)):
                    os.remove(os.path.join(d, f))
            extra = []
            if s["loss_before"] is not None:
                extra += ["--loss-before", repr(s["loss_before"])]
            if s["bound"] is not None:
                extra += ["--upper-bound", repr(s["bound"])]
            tools.prune(s["current"], [*extra, "-o", candidate, "-f"], report_path)
        report = read_json(report_path, "prune-rate's report")
        if s["loss_before"] is None:
            s["loss_before"] = float(report["data_driven"]["loss"])
        if not report["data_driven"]["pruned_any"]:
            s["stop"] = "no layer changes"
            os.remove(candidate)
            return t0
        sig = signature(report)
        if sig in s["rejected"] and s["repeats"] < 10 * args.iterations:
            # The same candidate as one already rejected: rejected at once, U shrinks further; such
            # steps do not count as iterations (at most 10 per iteration).
            s["repeats"] += 1
            s["bound"] = float(next_bound(report, False))
            say(f"the same candidate as iteration {s['rejected'][sig]}, rejected again without fine-tuning; next U {s['bound']!r}")
            shutil.rmtree(d)
            if s["bound"] < 0:
                s["stop"] = "upper bound below 0"
                s["iteration"] = i - 1  # as a run that ends here counts its iterations
                return t0
            continue
        regression = s.get("task") == "regression"
        step = replay_step(replay_log, i, report, regression) if replay_log is not None else None
        finetune_path = os.path.join(d, "finetune.json")
        if isinstance(step, dict):
            write_json(finetune_path, step)
            t0 -= round(step["seconds"])  # the loop's cost counts the fine-tuning skipped
        else:
            # --resume auto: the fine-tuning of an interrupted iteration goes on from its checkpoint
            # (regression: no early stop, all the epochs run; stop_at_validation_accuracy is refused there)
            early = [] if regression else ["--set", f"stop_at_validation_accuracy={s['early']!r}"]
            tools.dist(["--model", candidate, "-o", os.path.join(d, "tuned.onnx"), "-f", "--epochs", str(args.finetune_epochs),
                        "--lr", s["lr"], "--resume", "auto", "--set", "lr.warmup_epochs=0", "--set", "lr.decay=cosine",
                        "--set", "final_polish_epochs=0", *early,
                        "--set", 'data.test_images=""', "--set", 'data.test_labels=""',
                        "--metrics", os.path.join(d, "metrics.jsonl"), "--checkpoint", os.path.join(d, "ckpt")], finetune_path)
            if os.path.exists(os.path.join(d, "ckpt")):
                os.remove(os.path.join(d, "ckpt"))
        finetune = read_json(finetune_path, "dist-train's summary")
        if regression:
            acc, mae = None, finetune["validation_mae"]
            if step == "check":
                check_replayed_mae(replay_log, i, mae)
            ok = accepted_mae(mae, s["goal"])
            measure = f"validation MAE {mae!r}"
        else:
            acc = finetune["validation_accuracy"] * 100
            if step == "check":
                check_replayed_accuracy(replay_log, i, acc)
            ok = accepted(acc, s["goal"])
            measure = f"validation accuracy {acc}%"
        bound_next = float(next_bound(report, ok))
        if ok:
            s["current"] = os.path.join(d, "tuned.onnx")
            s["rejected"] = {}
        else:
            s["rejected"][sig] = i
        s["log"].append(log_entry(i, report, finetune, ok, acc, bound_next, s["current"], isinstance(step, dict), regression))
        say(f"iteration {i}: {report['totals']['params_before']} -> {report['totals']['params_after']} parameters, "
            f"{measure}: {'accepted' if ok else 'rejected'}, next U {bound_next!r}")
        s["bound"] = bound_next
        if bound_next < 0:
            s["stop"] = "upper bound below 0"
            return t0
        s["iteration"] = i + 1
    return t0


def finish(args, tools, out, s, t0):
    """log.json, final.onnx and summary.json (the test accuracy appears only here)."""
    s["done"] = True
    s["elapsed"] = time.monotonic() - t0
    save_state(out, s)
    write_json(os.path.join(out, "log.json"), s["log"])
    final = os.path.join(out, "final.onnx")
    shutil.copyfile(s["current"], final + ".tmp")
    os.replace(final + ".tmp", final)
    original = os.path.join(out, "original.onnx")
    if s.get("task") == "regression":
        val_before, val_after = tools.evaluate_regression(original, "validation"), tools.evaluate_regression(final, "validation")
        test_before, test_after = tools.evaluate_regression(original, "test"), tools.evaluate_regression(final, "test")
        measures = {"task": "regression",
                    "validation_mae_before": s["mae_before"], "validation_mae_after": val_after["mae"],
                    "validation_mae_limit": s["goal"], "mae_increase": float(args.mae_increase),
                    "validation_mse_before": val_before["mse"], "validation_mse_after": val_after["mse"],
                    "test_mae_before": test_before["mae"], "test_mae_after": test_after["mae"],
                    "test_mse_before": test_before["mse"], "test_mse_after": test_after["mse"],
                    "test_mae_per_target_before": test_before["mae_per_target"],
                    "test_mae_per_target_after": test_after["mae_per_target"]}
    else:
        acc_after = tools.evaluate(final, "validation")
        test_before, test_after = tools.evaluate(original, "test"), tools.evaluate(final, "test")
        measures = {"validation_accuracy_before": s["acc_before"] / 100, "validation_accuracy_after": acc_after / 100,
                    "test_accuracy_before": test_before / 100, "test_accuracy_after": test_after / 100}
    b, a = tools.costs(original), tools.costs(final)
    os.remove(os.path.join(out, ".eval.json"))
    log = s["log"]
    summary = {
        "params_before": b["params_before"], "params_after": a["params_before"],
        "params_reduction": 1 - a["params_before"] / b["params_before"],
        "macs_before": b["macs_before"], "macs_after": a["macs_before"],
        **measures,
        "iterations": len(log), "accepted": sum(e["accepted"] for e in log), "stopped_by": s["stop"],
        "rejected_without_finetuning": s["repeats"], "keep": [k for k in ",".join(args.keep).split(",") if k],
        "seconds": int(time.monotonic() - t0)}
    write_json(os.path.join(out, "summary.json"), summary)  # state.json stays: --resume --iterations K goes on
    return summary


def task_of(config):
    """The training configuration's task: "regression" or "classification" (dist-train's default)."""
    c = read_json(config, "the configuration")
    task = c.get("task", "classification") if isinstance(c, dict) else "classification"
    if task not in ("regression", "classification"):
        raise LoopError(f"the configuration '{config}' has \"task\": {json.dumps(task)} (regression or classification)")
    return task


class Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"prune_loop: error: {message}\n{self.format_usage().rstrip()} (--help for more)", file=sys.stderr)
        sys.exit(2)


def parse(argv):
    p = Parser(prog="prune_loop.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False,
               usage="prune_loop.py MODEL --config TRAIN.json --out DIR [options]")
    p.add_argument("-h", "--help", action="help", help=argparse.SUPPRESS)
    p.add_argument("model")
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    for name, default in (("--iterations", "10"), ("--ranks", "2"), ("--finetune-epochs", "3"), ("--validation", "5000"),
                          ("--batches", "100")):
        p.add_argument(name, default=default)
    p.add_argument("--finetune-lr", default="")
    p.add_argument("--accuracy-drop")  # default 0.1, classification only (main: the task is the configuration's)
    p.add_argument("--mae-increase")  # default 0.05, regression only
    p.add_argument("--margin", default="0.1")
    p.add_argument("--keep", action="append", default=[])
    p.add_argument("--seed")
    p.add_argument("-f", dest="force", action="store_true")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--replay")
    args = p.parse_args(argv)
    for name in ("iterations", "ranks", "finetune_epochs", "validation", "batches"):
        v = getattr(args, name)
        if not v.isdigit() or int(v) < 1:
            raise LoopError(f"--{name.replace('_', '-')} must be a positive integer, not '{v}'")
        setattr(args, name, int(v))
    for name in ("accuracy_drop", "mae_increase", "margin", "finetune_lr"):
        v = getattr(args, name)
        try:
            if v is not None and (v or name != "finetune_lr"):
                if not math.isfinite(float(v)):
                    raise ValueError
        except ValueError:
            raise LoopError(f"--{name.replace('_', '-')} must be a number, not '{v}'") from None
    if args.mae_increase is not None and not float(args.mae_increase) > -1:
        raise LoopError(f"--mae-increase must be > -1 (a relative change of the validation MAE), not '{args.mae_increase}'")
    if args.seed is not None and not args.seed.isdigit():
        raise LoopError(f"--seed must be a non-negative integer, not '{args.seed}'")
    args.force = args.force or args.resume
    return args


def main(argv):
    args = parse(argv)
    out = args.out
    tools = Tools(args, out)
    if not os.path.isfile(args.model):
        raise LoopError(f"no model '{args.model}'")
    replay_log = None
    if args.replay:
        try:
            with open(args.replay) as f:
                replay_log = json.load(f)
        except (OSError, ValueError):
            replay_log = None
        if not check_log(replay_log):
            raise LoopError(f"--replay: '{args.replay}' is not a loop's log.json (a list of iterations 1, 2, ...)")
    if not os.path.isfile(args.config):
        raise LoopError(f"no configuration '{args.config}'")
    args.task = task_of(args.config)
    if args.task == "regression":
        if args.accuracy_drop is not None:
            raise LoopError(f"--accuracy-drop is a classification option: '{args.config}' has \"task\": \"regression\" "
                            "(there is no accuracy); --mae-increase R sets the allowed relative increase of the validation MAE")
        args.mae_increase = args.mae_increase if args.mae_increase is not None else "0.05"
    else:
        if args.mae_increase is not None:
            raise LoopError(f"--mae-increase is a regression option: '{args.config}' is a classification configuration "
                            "(no \"task\": \"regression\"); --accuracy-drop A sets the allowed drop of validation accuracy")
        args.accuracy_drop = args.accuracy_drop if args.accuracy_drop is not None else "0.1"
    if replay_log is not None:
        check_replay_task(replay_log, args.task == "regression")
    if os.path.isdir(out) and os.listdir(out) and not args.force:
        raise LoopError(f"'{out}' is not empty (-f reuses it)")
    if args.keep:  # the kept layers are checked against the model before any work (no data, no output)
        if subprocess.run([tools.prune_rate, args.model, "--rate", "0", *tools.keep_args(), "-q"],
                          stdout=subprocess.DEVNULL).returncode != 0:
            raise LoopError(f"--keep '{','.join(args.keep)}' does not fit '{args.model}'")
    os.makedirs(out, exist_ok=True)
    # The options a run started with, to check a --resume against (the fine-tuning seed and bounds
    # decide every iteration's result).
    options = {"model": args.model, "config": args.config, "ranks": args.ranks, "finetune_epochs": args.finetune_epochs,
               "finetune_lr": args.finetune_lr, "accuracy_drop": args.accuracy_drop, "validation": args.validation,
               "margin": args.margin, "batches": args.batches, "seed": args.seed, "keep": ",".join(args.keep),
               "hpcnn_bin": os.environ.get("HPCNN_BIN", "")}
    if args.task == "regression":  # (a classification run's options stay as they were: its --resume of older runs)
        del options["accuracy_drop"]
        options.update(task="regression", mae_increase=args.mae_increase)
    options_path = os.path.join(out, "options.json")
    if args.resume:
        s = load_state(out)
        old = read_json(options_path, "--resume: the options of the run") if os.path.exists(options_path) else {}
        diff = options_diff(old, options)
        if diff:
            raise LoopError(f"--resume: the options differ from those '{out}' was started with ({'; '.join(diff)})")
        s = resume(args, out, s)
        resume_at = s["iteration"]
    else:
        for f in ("state.json", "summary.json"):
            if os.path.exists(os.path.join(out, f)):
                os.remove(os.path.join(out, f))
        write_json(options_path, options)
        s = start(args, tools, out)
        resume_at = 0
    t0 = time.monotonic() - s["elapsed"]
    t0 = iterate(args, tools, out, s, resume_at, replay_log, t0)
    summary = finish(args, tools, out, s, t0)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except LoopError as e:
        print(f"prune_loop: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("prune_loop: interrupted (--resume goes on from the last iteration's start)", file=sys.stderr)
        sys.exit(130)
