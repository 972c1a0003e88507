#!/usr/bin/env bash
# The structured sparse FCL against the dense first FC layer at VGG-16's fc6 shapes (batch 64,
# 512x7x7 -> 4096, C' = 24): ours (bench/fcl_bench: ops/sparse_fcl.h and ops/gemm.h) and PyTorch
# (Debian's python3-torch, bench/bench_fcl_torch.py) in the same run, 1 and 2 threads, forward
# and backward separately. Prints a table and checks the goals of issue 14: each of our four times
# no slower than PyTorch's, and a forward speed-up of at least 0.85 of the MAC ratio.
# Each implementation runs BENCH_ROUNDS times, alternating, and each time is the least of its rounds'
# medians (on a shared VM a round's median still moves by up to 60%).
# Environment: BENCH_ITERATIONS (10), BENCH_BATCH (64), BENCH_ROUNDS (3).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench="$here/build/bench/fcl_bench"
[ -x "$bench" ] || { echo "bench_fcl: build first (scripts/build.sh): $bench is missing" >&2; exit 1; }
it=${BENCH_ITERATIONS:-10}
batch=${BENCH_BATCH:-64}
rounds=${BENCH_ROUNDS:-3}
for v in it batch rounds; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "bench_fcl: BENCH_${v^^} must be a whole number >= 1, not '${!v}'" >&2; exit 1; }
done
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for _ in $(seq "$rounds"); do for t in 1 2; do
  OMP_NUM_THREADS=$t "$bench" --threads "$t" --batch "$batch" --iterations "$it" | sed 's/^{/{"impl": "ours", /' >> "$results"
  /usr/bin/python3 "$here/bench/bench_fcl_torch.py" --threads "$t" --batch "$batch" --iterations "$it" \
    | sed 's/^{/{"impl": "torch", /' >> "$results"
done; done
/usr/bin/python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ms = {}
for r in rows:
    k = (r["impl"], r["layer"], r["pass"], r["threads"])
    ms[k] = min(ms.get(k, r["ms"]), r["ms"])
macs = {(r["layer"], r["pass"]): r["macs"] for r in rows}
ok = True
print("| threads | pass | dense ours / torch (ms) | sparse ours / torch (ms) | speed-up ours / torch | MAC ratio |")
print("|---|---|---|---|---|---|")
for t in (1, 2):
    for p in ("forward", "backward"):
        d, s = ms[("ours", "dense", p, t)], ms[("ours", "sparse", p, t)]
        td, tsp = ms[("torch", "dense", p, t)], ms[("torch", "sparse", p, t)]
        ratio = macs[("dense", p)] / macs[("sparse", p)]
        print(f"| {t} | {p} | {d:.1f} / {td:.1f} | {s:.2f} / {tsp:.2f} | {d / s:.2f}x / {td / tsp:.2f}x | {ratio:.2f}x |")
        for layer, ours, theirs in (("dense", d, td), ("sparse", s, tsp)):
            if ours > theirs:
                ok = False
                print(f"bench_fcl: goal missed: {layer} {p} at {t} thread(s): {ours:.2f} ms > PyTorch {theirs:.2f} ms")
        if p == "forward" and d / s < 0.85 * ratio:
            ok = False
            print(f"bench_fcl: goal missed: forward speed-up {d / s:.2f}x < 0.85 x {ratio:.2f}x at {t} thread(s)")
print("bench_fcl: all goals met" if ok else "bench_fcl: some goals missed")
PY
