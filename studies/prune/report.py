"""The table and the plot of studies/prune/run.sh: reads out/study/<model>/ and writes
out/study/table.md (markdown) and out/study/accuracy_vs_params.png (test accuracy against
parameters, both methods, every seed, with the unpruned model).

    studies/prune/report.py [OUT] [--record DIR]

--record DIR also copies the small files the table is made from (settings, summaries, logs,
accuracies, speeds, seconds: kilobytes) and the trained base model every seed starts from (about
1-2 MB; no pruned or fine-tuned model) into DIR with the same layout, so that a study can be kept
in the repository (studies/prune/records/), its table and plot remade from the record alone
(studies/prune/report.py DIR), and more seeds added to it without training the base again (copy
DIR's <model>/ into OUT and run studies/prune/run.sh with the same settings: the steps whose
outputs the record holds are skipped; or STUDY_REPLAY=DIR, which also rebuilds the loops of
unfinished seeds from the iterations the record keeps of them)."""
import argparse
import glob
import json
import os
import shutil
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NAMES = {"cnn": "CNN", "resnet20": "ResNet-20"}


def load(path):
    with open(path) as f:
        return json.load(f)


def mean_sd(values, digits=2):
    """Mean ± sample standard deviation over the seeds."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:,.{digits}f}"
    return f"{statistics.mean(values):,.{digits}f} ± {statistics.stdev(values):,.{digits}f}"


def main(out):
    rows, fig_data = [], {}
    for model in ("cnn", "resnet20"):
        d = os.path.join(out, model)
        speed_file = os.path.join(d, "base.onnx.speed.json")
        if not os.path.exists(os.path.join(d, "base.onnx")) and not os.path.exists(speed_file):
            continue  # not trained yet (a record keeps base.onnx.speed.json, not the model)
        base_speed = load(speed_file) if os.path.exists(speed_file) else {}
        base_secs = int(open(os.path.join(d, "base.seconds")).read()) if os.path.exists(os.path.join(d, "base.seconds")) else None
        base_acc = base_speed.get("test_accuracy")
        settings = load(os.path.join(d, "settings.json")) if os.path.exists(os.path.join(d, "settings.json")) else {}
        entries = {"loop": [], "uniform": [], "uniform-eq": []}
        for method in entries:
            for s in sorted(glob.glob(os.path.join(d, f"{method}-s*", "summary.json"))):
                run = os.path.dirname(s)
                if not os.path.exists(os.path.join(run, "final_tuned.test.json")):
                    continue  # not finished
                e = load(s)
                e["test_accuracy_after"] = load(os.path.join(run, "final_tuned.test.json"))["test_accuracy"]
                speed_file = os.path.join(run, "final_tuned.onnx.speed.json")
                e["speed"] = load(speed_file)["images_per_second"] if os.path.exists(speed_file) else None
                e["seed"] = os.path.basename(run).rsplit("-s", 1)[1]
                e["finetune_epochs"] = e.get("finetune_epochs", settings.get("final_epochs", 0))  # uniform-eq: its own
                e["seconds"] = int(open(os.path.join(run, "final_tuned.seconds")).read())
                if method == "loop":
                    log = load(os.path.join(run, "log.json"))
                    e["search_epochs"] = sum(x["finetune_epochs"] for x in log)
                    e["search_seconds"] = load(s)["seconds"]
                    e["seconds"] += e["search_seconds"]
                entries[method].append(e)
        fig_data[model] = (entries, base_acc)
        for method, es in entries.items():
            if not es:
                continue
            pb = es[0]["params_before"]
            rows.append({
                "model": NAMES[model],
                "method": "automatic rates (loop)" if method == "loop" else
                          "uniform rate " + ", ".join(dict.fromkeys(str(e.get("rate", "")) for e in es))  # each seed's, in seed order
                          + (", the loop's epochs" if method == "uniform-eq" else ""),
                "params": f"{pb:,} → {statistics.mean(e['params_after'] for e in es):,.0f} "
                          f"(−{100 * (1 - statistics.mean(e['params_after'] for e in es) / pb):.1f}%)",
                "macs": f"{es[0]['macs_before']:,} → {statistics.mean(e['macs_after'] for e in es):,.0f}",
                "speed": f"{base_speed.get('images_per_second', 0):,.0f} → " + mean_sd([e["speed"] for e in es if e["speed"]], 0)
                         if base_speed else "-",
                "acc": (f"{100 * base_acc:.2f} → " if base_acc else "") + mean_sd([100 * e["test_accuracy_after"] for e in es]),
                "iterations": mean_sd([e["iterations"] for e in es], 1) if method == "loop" else "-",
                "epochs": (f"{mean_sd([e['search_epochs'] for e in es], 0)} search + " if method == "loop" else "")
                          + (f"{mean_sd([e['finetune_epochs'] for e in es], 0)} (search + final)" if method == "uniform-eq"
                             else f"{es[0]['finetune_epochs']} final"),
                "wall": f"{statistics.mean(e['seconds'] for e in es) / 60:.0f} min per seed"
                        + (f" (+ base training {base_secs / 60:.0f} min)" if base_secs else ""),
                "seeds": len(es),
            })
    if not fig_data:
        sys.exit(f"prune_study_report: error: no trained model under {out}/cnn or {out}/resnet20 (no base.onnx or base.onnx.speed.json)")
    lines = ["| model | method | parameters | MACs | inference images/s | test accuracy % | iterations | fine-tuning epochs | wall time | seeds |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['method']} | {r['params']} | {r['macs']} | {r['speed']} | {r['acc']} | "
                     f"{r['iterations']} | {r['epochs']} | {r['wall']} | {r['seeds']} |")
    for model, (entries, _) in fig_data.items():
        # Per seed, the loop against each baseline that seed has: points of test accuracy.
        loop = {e["seed"]: e for e in entries["loop"]}
        for method, what in (("uniform", "the same final fine-tuning"), ("uniform-eq", "the same total epochs")):
            pairs = [(s, 100 * (loop[e["seed"]]["test_accuracy_after"] - e["test_accuracy_after"]))
                     for e in entries[method] for s in [e["seed"]] if s in loop]
            if pairs:
                lines.append(f"\n{NAMES[model]}, loop − uniform rate at {what}: " + ", ".join(f"seed {s} {d:+.2f}" for s, d in pairs)
                             + f"; mean {mean_sd([d for _, d in pairs])} points")
    for model in fig_data:
        settings = os.path.join(out, model, "settings.json")
        if os.path.exists(settings):
            lines.append(f"\n{NAMES[model]} loop settings: {open(settings).read().strip()}")
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    fig, axes = plt.subplots(1, max(1, len(fig_data)), figsize=(6 * max(1, len(fig_data)), 4.5), squeeze=False)
    for ax, (model, (entries, base_acc)) in zip(axes[0], fig_data.items()):
        for method, marker, label in (("loop", "o", "automatic rates (Sakai et al.)"), ("uniform", "s", "uniform L1 rate"),
                                      ("uniform-eq", "^", "uniform L1 rate, the loop's epochs")):
            es = entries[method]
            if es:
                ax.scatter([e["params_after"] for e in es], [100 * e["test_accuracy_after"] for e in es], marker=marker, label=label)
        if base_acc and (entries["loop"] or entries["uniform"]):
            pb = (entries["loop"] or entries["uniform"])[0]["params_before"]
            ax.scatter([pb], [100 * base_acc], marker="*", s=150, color="k", label="unpruned")
        ax.set_title(f"{NAMES[model]} on Fashion-MNIST")
        ax.set_xlabel("parameters")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "accuracy_vs_params.png"), dpi=120)


# What a record keeps, relative to OUT/<model>/: the files main() reads, the summaries and prune
# reports behind them, and the base model (so that the study can go on from the record).
RECORD = ["settings.json", "base.onnx", "base.onnx.speed.json", "base.seconds", "base.summary.json", "*-s*/summary.json", "*-s*/log.json",
          "*-s*/final_tuned.test.json", "*-s*/final_tuned.onnx.speed.json", "*-s*/final_tuned.seconds", "*-s*/final_tuned.json",
          "uniform-s*/prune.json", "uniform-eq-s*/prune.json"]


def partial_log(run):
    """The iterations a loop that has not finished has logged so far (the log in prune_loop.py's
    state.json, written at the start of every iteration: what --resume goes on from), or None."""
    try:
        with open(os.path.join(run, "state.json")) as f:
            log = json.load(f)["log"]
    except (OSError, KeyError, TypeError, ValueError):
        return None
    return log if isinstance(log, list) and log else None


def record(out, dest):
    """Copies the RECORD files of OUT into DEST. A seed's run folder that is not finished (no
    final_tuned.test.json yet: a loop whose final fine-tuning is still to come, say) is left out
    whole, so that a study continued from the record runs that seed again rather than skipping a
    loop whose final model the record does not keep; what DEST held for it (and for that seed's
    uniform rate, which follows the loop's result) is removed. Of such a loop the record keeps the
    iterations logged so far, as loop-s<s>/log.json alone, for run.sh's STUDY_REPLAY to
    rebuild it from (a study that outlives its machine)."""
    for model in NAMES:
        unfinished = {run for run in glob.glob(os.path.join(out, model, "*-s*")) if not os.path.exists(os.path.join(run, "final_tuned.test.json"))}
        # A seed's uniform rate follows its loop's result: an unfinished loop's is redone.
        unfinished |= {run.replace(f"{os.sep}loop-s", f"{os.sep}{u}-s") for run in unfinished if os.path.basename(run).startswith("loop-s")
                       for u in ("uniform", "uniform-eq")}
        for run in unfinished:
            target = os.path.join(dest, os.path.relpath(run, out))
            shutil.rmtree(target, ignore_errors=True)
            log = partial_log(run) if os.path.basename(run).startswith("loop-") else None
            if log:
                os.makedirs(target)
                with open(os.path.join(target, "log.json"), "w") as f:
                    f.write("[" + ",\n".join(json.dumps(e) for e in log) + "]\n")
        for pattern in RECORD:
            for src in glob.glob(os.path.join(out, model, pattern)):
                if os.path.dirname(src) in unfinished:
                    continue
                target = os.path.join(dest, os.path.relpath(src, out))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(src, target)
    for name in ("wall_seconds", "table.md", "accuracy_vs_params.png"):
        if os.path.exists(os.path.join(out, name)):
            shutil.copyfile(os.path.join(out, name), os.path.join(dest, name))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Table and plot of studies/prune/run.sh")
    ap.add_argument("out", nargs="?", default="out/study")
    ap.add_argument("--record", metavar="DIR", help="also copy the files the table is made from into DIR")
    a = ap.parse_args()
    main(a.out)
    if a.record:
        record(a.out, a.record)
