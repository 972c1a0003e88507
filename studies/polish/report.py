"""The table of studies/polish/run.sh: reads out/polish_study/<model>/s<seed>/ and writes
out/polish_study/table.md: per model and arm the test accuracy of every seed and its mean ± sample
standard deviation, the differences (b) - (a) and (d) - (c) per seed, and the two expectations of
issue 15 checked against the data ((b) - (a) >= 0.2 points for at least one model; (d) - (c) no
worse than one standard deviation of (c)). Finished seeds only; prints the table too."""
import glob
import json
import os
import statistics
import sys

NAMES = {"cnn": "CNN", "resnet20": "ResNet-20"}
ARMS = {"a": "(a) no polishing", "b": "(b) bn-polish after training", "c": "(c) final_polish_epochs",
        "d": "(d) final_polish_epochs + bn-polish"}


def load(path):
    with open(path) as f:
        return json.load(f)


def mean_sd(values):
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def main(out):
    lines = []
    verdict_b = []
    verdict_d = []
    for model in ("cnn", "resnet20"):
        d = os.path.join(out, model)
        if not os.path.isdir(d):
            continue
        settings = load(os.path.join(d, "settings.json")) if os.path.exists(os.path.join(d, "settings.json")) else {}
        runs = []
        for run in sorted(glob.glob(os.path.join(d, "s*"))):
            if all(os.path.exists(os.path.join(run, f"{a}.test.json")) for a in ARMS):
                acc = {a: 100 * load(os.path.join(run, f"{a}.test.json"))["test_accuracy"] for a in ARMS}
                secs = {a: int(open(os.path.join(run, f"{a}.seconds")).read()) for a in ARMS
                        if os.path.exists(os.path.join(run, f"{a}.seconds"))}
                runs.append((os.path.basename(run)[1:], acc, secs))
        if not runs:
            continue
        seeds = [r[0] for r in runs]
        lines.append(f"### {NAMES[model]}: {settings.get('epochs', '?')} epochs, global batch "
                     f"{settings.get('global_batch', '?')} ({settings.get('ranks', '?')} ranks), final_polish_epochs "
                     f"{settings.get('final_polish_epochs', '?')} in (c)/(d), bn-polish on the first "
                     f"{settings.get('polish_samples', '?'):,} training images\n")
        lines.append("| arm | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± sd | wall time per seed |")
        lines.append("|---|" + "---|" * len(seeds) + "---|---|")
        for a, name in ARMS.items():
            vals = [r[1][a] for r in runs]
            secs = [r[2].get(a) for r in runs if r[2].get(a) is not None]
            wall = f"{statistics.mean(secs):,.0f} s" if secs else "-"
            lines.append(f"| {name} | " + " | ".join(f"{v:.2f}" for v in vals) + f" | {mean_sd(vals)} | {wall} |")
        for x, y, label in (("b", "a", "(b) − (a)"), ("d", "c", "(d) − (c)")):
            diffs = [r[1][x] - r[1][y] for r in runs]
            lines.append(f"| {label} | " + " | ".join(f"{v:+.2f}" for v in diffs) + f" | {mean_sd(diffs)} | |")
        lines.append("")
        ba = statistics.mean(r[1]["b"] - r[1]["a"] for r in runs)
        dc = statistics.mean(r[1]["d"] - r[1]["c"] for r in runs)
        sd_c = statistics.stdev([r[1]["c"] for r in runs]) if len(runs) > 1 else 0.0
        verdict_b.append((NAMES[model], ba))
        verdict_d.append((NAMES[model], dc, sd_c))
    if verdict_b:
        best = max(verdict_b, key=lambda v: v[1])
        lines.append(f"(b) − (a) ≥ 0.2 points for at least one model: {'yes' if best[1] >= 0.2 else 'no'} "
                     f"(largest mean: {best[0]}, {best[1]:+.2f} points)  ")
        worst = [f"{n} {dc:+.2f} (sd of (c) {sd:.2f})" for n, dc, sd in verdict_d]
        ok = all(dc >= -sd for _, dc, sd in verdict_d)
        lines.append(f"(d) − (c) no worse than one standard deviation: {'yes' if ok else 'no'} ({'; '.join(worst)})")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out/polish_study")
