#!/usr/bin/env python3
"""Reads and checks a pipeline configuration (scripts/pipeline.sh; every key in configs/README.md)
and prints it as bash assignments with the defaults filled in. Unknown keys are errors that list
the valid keys; a value of the wrong type is an error naming the key. Exit 1 with the message
on stderr. Standard library only."""
import json
import os
import shlex
import sys

SCHEMA = {
    "train_config": (str, None),
    "run_dir": (str, ""),
    "model": (str, ""),
    "ranks": (int, 2),
    "seed": (int, 1),
    "validation_samples": (int, 5000),
    "compress_data": (bool, True),
    "train": (dict, {"epochs": (int, 0), "set": (list, [])}),
    "prune": (dict, {"iterations": (int, 6), "finetune_epochs": (int, 2), "accuracy_drop": (float, 0.3),
                     "mae_increase": (float, 0.05), "margin": (float, 0.1), "keep": (list, []), "finetune_lr": (float, 0.0)}),
    "sparsify": (dict, {"enabled": ("auto", "auto"), "compression": (float, 20.0), "init": (str, "data"),
                        "finetune_epochs": (int, 2)}),
    "polish": (dict, {"enabled": ("auto", "auto"), "samples": (int, 0)}),
}


def fail(msg):
    print(f"pipeline: error: {msg}", file=sys.stderr)
    sys.exit(1)


def fill(raw, schema, where, origin):
    if not isinstance(raw, dict):
        fail(f"{origin}: '{where.rstrip('.') or 'the configuration'}' must be a JSON object")
    unknown = sorted(set(raw) - set(schema))
    if unknown:
        fail(f"{origin}: unknown key '{where}{unknown[0]}' (valid keys: {', '.join(schema)})")
    out = {}
    for key, (kind, default) in schema.items():
        name = where + key
        if kind is dict:
            out[key] = fill(raw.get(key, {}), default, name + ".", origin)
            continue
        if key not in raw:
            if default is None:
                fail(f"{origin}: key '{name}' is required")
            out[key] = default
            continue
        v = raw[key]
        if kind == "auto":  # true, false or "auto"
            if not (isinstance(v, bool) or v == "auto"):
                fail(f"{origin}: '{name}' must be true, false or \"auto\", not {json.dumps(v)}")
            out[key] = v
            continue
        ok = (isinstance(v, (int, float)) and not isinstance(v, bool)) if kind is float else \
             (isinstance(v, int) and not isinstance(v, bool)) if kind is int else isinstance(v, kind)
        if not ok:
            fail(f"{origin}: '{name}' must be a JSON {'number' if kind is float else kind.__name__}, not {json.dumps(v)}")
        out[key] = v
    return out


def main():
    path = sys.argv[1]
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except OSError as e:
        fail(f"{path}: cannot read: {e.strerror}")
    except json.JSONDecodeError as e:
        fail(f"{path}: not JSON: {e.msg} at line {e.lineno}, column {e.colno}")
    c = fill(raw, SCHEMA, "", path)
    for key in ("ranks",):
        if c[key] < 1:
            fail(f"{path}: '{key}' must be >= 1")
    for key in ("prune.iterations", "prune.finetune_epochs", "sparsify.finetune_epochs"):
        a, b = key.split(".")
        if c[a][b] < 1:
            fail(f"{path}: '{key}' must be >= 1")
    if c["prune"]["finetune_lr"] < 0:
        fail(f"{path}: 'prune.finetune_lr' must be >= 0 (0: the loop's default, lr.base / 10)")
    if c["sparsify"]["init"] not in ("svd", "data", "random"):
        fail(f"{path}: 'sparsify.init' must be svd, data or random")
    if c["sparsify"]["compression"] <= 1:
        fail(f"{path}: 'sparsify.compression' must be > 1")
    for s in c["prune"]["keep"]:
        if not isinstance(s, str) or not s or "," in s or s != s.strip() or any(ch.isspace() for ch in s):
            fail(f"{path}: 'prune.keep' holds layer names, not {json.dumps(s)}")
    for s in c["train"]["set"]:
        if not isinstance(s, str) or "=" not in s:
            fail(f"{path}: 'train.set' holds KEY=VALUE strings, not {json.dumps(s)}")
    if not os.path.isfile(c["train_config"]):
        fail(f"{path}: train_config '{c['train_config']}' is not a file")
    with open(c["train_config"], encoding="utf-8") as f:
        try:
            train = json.load(f)
        except json.JSONDecodeError as e:
            fail(f"{c['train_config']}: not JSON: {e.msg} at line {e.lineno}")
    data = train.get("data", {})
    # The task (dist-train's "task", possibly set by train.set): a regression run's prune loop keeps
    # the validation MAE within prune.mae_increase, a classification run's accuracy within
    # prune.accuracy_drop; the other key is an error when given.
    task = train.get("task", "classification") if isinstance(train, dict) else "classification"
    for s in c["train"]["set"]:
        if s.split("=", 1)[0].strip() == "task":
            task = s.split("=", 1)[1].strip().strip('"')
    given = raw.get("prune", {})
    if task == "regression" and "accuracy_drop" in given:
        fail(f"{path}: 'prune.accuracy_drop' is a classification key; {c['train_config']} has \"task\": \"regression\" "
             "(there is no accuracy): 'prune.mae_increase' sets the allowed relative increase of the validation MAE")
    if task != "regression" and "mae_increase" in given:
        fail(f"{path}: 'prune.mae_increase' is a regression key; {c['train_config']} is a classification configuration "
             "(no \"task\": \"regression\"): 'prune.accuracy_drop' sets the allowed drop of validation accuracy")
    if c["prune"]["mae_increase"] <= -1:
        fail(f"{path}: 'prune.mae_increase' must be > -1 (a relative change of the validation MAE)")
    run = c["run_dir"] or os.path.join("out", "pipeline", os.path.splitext(os.path.basename(path))[0])
    model = c["model"] or train.get("model", "")
    if not model:
        fail(f"{path}: no 'model', and {c['train_config']} names none")
    epochs = c["train"]["epochs"] or train.get("epochs", 0)
    if epochs < 1:
        fail(f"{path}: 'train.epochs' must be >= 1 (or the training configuration's epochs)")
    absolute = lambda p: os.path.abspath(p) if p else ""  # noqa: E731
    out = {
        "run": absolute(run), "train_config": absolute(c["train_config"]), "model": absolute(model),
        "ranks": c["ranks"], "seed": c["seed"], "validation": c["validation_samples"],
        "compress": int(c["compress_data"]), "train_epochs": epochs,
        "prune_iterations": c["prune"]["iterations"], "prune_epochs": c["prune"]["finetune_epochs"],
        "prune_drop": c["prune"]["accuracy_drop"], "prune_margin": c["prune"]["margin"],
        "task": "regression" if task == "regression" else "classification",
        "prune_measure": f"--mae-increase {c['prune']['mae_increase']}" if task == "regression"
        else f"--accuracy-drop {c['prune']['accuracy_drop']}",
        "prune_lr": c["prune"]["finetune_lr"],
        "fcl_compression": c["sparsify"]["compression"], "fcl_init": c["sparsify"]["init"],
        "fcl_epochs": c["sparsify"]["finetune_epochs"], "polish_samples": c["polish"]["samples"],
        "fcl_enabled": json.dumps(c["sparsify"]["enabled"]).strip('"'),
        "polish_enabled": json.dumps(c["polish"]["enabled"]).strip('"'),
    }
    for k, v in out.items():
        print(f"{k}={shlex.quote(str(v))}")
    print("declare -A data=(" + " ".join(f"[{k}]={shlex.quote(absolute(data.get(k, '')))}" for k in
                                         ("train_images", "train_labels", "test_images", "test_labels")) + ")")
    print("prune_keep=(" + (f"--keep {shlex.quote(','.join(c['prune']['keep']))}" if c["prune"]["keep"] else "") + ")")
    print("train_set=(" + " ".join(f"--set {shlex.quote(s)}" for s in c["train"]["set"]) + ")")
    # Relative paths of the configuration are relative to the current folder, as dist-train's.
    print(f"config_file={shlex.quote(os.path.abspath(path))}")


if __name__ == "__main__":
    main()
