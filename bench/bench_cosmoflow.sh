#!/usr/bin/env bash
# Benchmark: training throughput (samples/s for forward + backward + SGD update) and peak resident
# memory of the CPU training engine on the CosmoFlow 3-D CNN (configs/cosmoflow/README.md, issue 42
# item 7), side by side with PyTorch on the CPU in the same run: the 3-D twin of bench/bench_train.sh.
#
# PyTorch is the PyPI wheel (torch 2.x; oneDNN and MKL inside) in <repo>/.venv-torch, running
# bench/cosmoflow_torch.py, the same network as a native module at its best: channels_last_3d,
# torch.set_num_threads and OMP_NUM_THREADS/MKL_NUM_THREADS = T, MSE loss, SGD momentum 0.9.
# Create that venv once (git-ignored; configs/cosmoflow/README.md):
#   python3 -m venv .venv-torch && .venv-torch/bin/pip install torch numpy onnx onnxruntime
# (PyPI's default Linux wheel bundles CUDA libraries, unused here; the CPU-only wheel,
# pip install torch --index-url https://download.pytorch.org/whl/cpu, runs the same CPU kernels.)
# Ours: build/bench/train_bench MODEL.onnx --loss mse (random targets [B, 4] in [-1, 1], the mean
# squared error as F.mse_loss; nn/regression.h), one fixed random N(0, 1) batch [B, 4, S, S, S].
# Models: out/cosmoflow_models/cosmoflow_{S}_k3.onnx (configs/cosmoflow/make_models.py, written if missing).
#
# Part 1, throughput: for each size S (32, 64; kernel 3), batch B (4, 16) and thread count T (1, 2),
# ours and torch run interleaved (ours, torch, ours, torch, ...), one process per case, each under
# /usr/bin/time -v for its peak RSS; both do 1 warm-up step, then STEPS_S timed steps; the best
# samples/s of the rounds counts and the largest peak RSS.
# Part 2, the real shape: 128^3 (5 conv blocks), batch 1 and 4 (4 only when /proc/meminfo's
# MemAvailable exceeds 1.25 x 4 x the larger batch-1 peak RSS plus 1 GiB), T = 2 (THREADS_128):
# the time of one training step (1 warm-up step, then the median of 3), and peak RSS, ours beside
# torch (cosmoflow_torch.py step); one round.
# Goals: ours >= 1.0x torch's samples/s and peak RSS <= torch's, in every row of both parts.
#
# Environment:
#   BUILD_DIR       build folder (default: <repo>/build); configured if needed, train_bench built
#   BUILD_JOBS      parallel jobs for that build (default: nproc)
#   THREADS         thread counts of part 1 (default: "1 2")
#   SIZES           default "32 64"; BATCHES default "4 16"
#   ROUNDS          interleaved rounds per engine in part 1 (default 2)
#   STEPS_32, STEPS_64  timed steps per run at batch 4 (default 10 and 3); at batch 16 a quarter
#                   (at least 2)
#   BATCHES_128     default "1 4" ("" skips part 2); THREADS_128 default 2; STEPS_128 default 3
#   WAIT_IDLE       before each run, wait up to this many seconds for the other processes to
#                   leave the CPUs (< 10% busy for 3 s in a row; default 0: no wait)
#   NICE            run both engines under `nice -n NICE`, and give this session's scheduler
#                   autogroup that nice value too (with autogroups, nice alone does not act
#                   across sessions); e.g. -20 as root on a shared machine
#   TORCH_PY        default <repo>/.venv-torch/bin/python
# Exit status: 0 when all goals are met, 1 when one is missed, 2 when a run failed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${BUILD_DIR:-$here/build}"
py="${TORCH_PY:-$here/.venv-torch/bin/python}"
threads_list="${THREADS:-1 2}"
threads_list=$(tr ' ' '\n' <<< "$threads_list" | awk 'NF && !seen[$0]++' | tr '\n' ' ')
sizes="${SIZES:-32 64}"
batches="${BATCHES:-4 16}"
rounds="${ROUNDS:-2}"
batches_128="${BATCHES_128-1 4}"
threads_128="${THREADS_128:-2}"
steps_128="${STEPS_128:-3}"
: "${STEPS_32:=10}" "${STEPS_64:=3}"
modeldir="$here/out/cosmoflow_models"

if ! "$py" -c "import torch" 2> /dev/null; then
  echo "bench_cosmoflow: no PyTorch at $py; create .venv-torch (see the header of $0)" >&2
  exit 2
fi

# ---- build and models -------------------------------------------------------------------
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >&2
fi
cmake --build "$build" --target train_bench -j "${BUILD_JOBS:-$(nproc)}" >&2
bench="$build/bench/train_bench"
need_sizes="$sizes"
[ -z "$batches_128" ] || need_sizes="$need_sizes 128"
for s in $need_sizes; do
  if [ ! -s "$modeldir/cosmoflow_${s}_k3.onnx" ]; then
    "$here/.venv/bin/python" "$here/configs/cosmoflow/make_models.py" "$modeldir" --sizes "$s" --kernels 3 >&2
  fi
done

if [ -n "${NICE:-}" ] && [ -w /proc/self/autogroup ]; then
  echo "$NICE" 2>/dev/null > /proc/self/autogroup || echo "   warning: cannot set the autogroup nice value" >&2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
maxf() { awk -v a="$1" -v b="$2" 'BEGIN{print (b > a ? b : a)}'; }
field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"}]*\)\"\{0,1\}[,}].*/\1/p" "$2" | head -1; }
mem_available_kib() { awk '/^MemAvailable:/ {print $2}' /proc/meminfo; }

# Percentage of the machine's CPU time in use over $1 (default 2) seconds (the cores may be shared;
# a busy machine skews the figures).
busy_percent() {
  local a b
  read -ra a < /proc/stat; sleep "${1:-2}"; read -ra b < /proc/stat
  awk -v u="$(( (b[1]+b[2]+b[3]+b[6]+b[7]) - (a[1]+a[2]+a[3]+a[6]+a[7]) ))" \
      -v i="$(( (b[4]+b[5]) - (a[4]+a[5]) ))" 'BEGIN{printf "%.0f", (u + i > 0) ? 100 * u / (u + i) : 0}'
}

# run NAME SPS_KEY CPU_KEY CMD...: runs CMD under /usr/bin/time -v; stdout (one JSON line) to
# $tmp/NAME.json, stderr to $tmp/NAME.err; sets sps (the SPS_KEY field of the JSON line, 0 on
# failure), spc (the CPU_KEY field, samples per CPU second), kib (peak RSS), wall (s) and waited (s).
run() {
  local name=$1 key=$2 ckey=$3; shift 3
  local idle=0
  waited=0
  while [ "$waited" -lt "${WAIT_IDLE:-0}" ] && [ "$idle" -lt 3 ]; do
    if [ "$(busy_percent 1)" -le 10 ]; then idle=$((idle + 1)); else idle=0; fi
    waited=$((waited + 1))
  done
  if /usr/bin/time -v -o "$tmp/$name.time" nice -n "${NICE:-0}" "$@" > "$tmp/$name.json" 2> "$tmp/$name.err"; then
    sps=$(field "$key" "$tmp/$name.json") spc=$(field "$ckey" "$tmp/$name.json")
    [ -n "$sps" ] || { echo "== $name: no $key in its output" >&2; sps=0 failed=1; }
    [ -n "$spc" ] || spc=0
  else
    echo "== $name failed:" >&2; tail -n 5 "$tmp/$name.err" >&2
    sps=0 spc=0 failed=1
  fi
  kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/$name.time" 2> /dev/null)
  [ -n "$kib" ] || kib=0
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; printf "%.1f", s}' \
         "$tmp/$name.time" 2> /dev/null)
  [ -n "$wall" ] || wall=0
}

t_start=$(date +%s)
busy=$(busy_percent)
echo "== $(nproc) cores:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); busy before the runs: ${busy}%;" \
     "load average: $(cut -d' ' -f1-3 /proc/loadavg); MemAvailable $(( $(mem_available_kib) / 1048576 )) GiB"
[ "$busy" -le 10 ] || echo "   warning: other processes use the CPUs; throughput figures will be low and noisy" >&2
torch_version=$("$py" -c "import torch; print(torch.__version__)")
failed=0 missed=0 waited_total=0
rows=()

# ---- part 1: throughput ------------------------------------------------------------------
for s in $sizes; do
  v="STEPS_$s"; steps4=${!v:-3}
  for b in $batches; do
    steps=$(( steps4 * 4 / b )); [ "$steps" -ge 2 ] || steps=2
    for t in $threads_list; do
      best_ours=0 best_torch=0 mem_ours=0 mem_torch=0 cpu_ours=0 cpu_torch=0
      for r in $(seq "$rounds"); do
        run "ours-$s-$b-$t-$r" images_per_s images_per_cpu_s "$bench" "$modeldir/cosmoflow_${s}_k3.onnx" --loss mse \
          --threads "$t" --batch "$b" --warmup 1 --steps "$steps" --lr 1e-4
        waited_total=$((waited_total + waited))
        echo "   ${s}^3 B=$b T=$t round $r: ours  $sps samples/s, $((kib / 1024)) MiB, ${wall}s (waited ${waited}s)" >&2
        best_ours=$(maxf "$best_ours" "$sps") cpu_ours=$(maxf "$cpu_ours" "$spc")
        [ "$kib" -gt "$mem_ours" ] && mem_ours=$kib
        run "torch-$s-$b-$t-$r" samples_per_second samples_per_cpu_s \
          env OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" "$py" "$here/bench/cosmoflow_torch.py" throughput \
          --sizes "$s" --batches "$b" --threads "$t" --kernel 3 --seconds 0 --min-steps "$steps"
        waited_total=$((waited_total + waited))
        echo "   ${s}^3 B=$b T=$t round $r: torch $sps samples/s, $((kib / 1024)) MiB, ${wall}s (waited ${waited}s)" >&2
        best_torch=$(maxf "$best_torch" "$sps") cpu_torch=$(maxf "$cpu_torch" "$spc")
        [ "$kib" -gt "$mem_torch" ] && mem_torch=$kib
      done
      rows+=("$(awk -v m="${s}^3" -v b="$b" -v t="$t" -v o="$best_ours" -v p="$best_torch" -v mo="$mem_ours" \
                    -v mp="$mem_torch" -v co="$cpu_ours" -v cp="$cpu_torch" 'BEGIN{
        r = p > 0 ? o / p : 0; mr = mp > 0 ? mo / mp : 0; cr = cp > 0 ? co / cp : 0
        ok = (r >= 1.0 && mr <= 1.0)
        printf "%-6s %3d %2d %11.2f %11.2f %6.2fx %9.0f %9.0f %6.2fx  %-4s %8.2fx\n", m, b, t, o, p, r, mo / 1024, mp / 1024, mr,
               ok ? "PASS" : "MISS", cr}')")
    done
  done
done

# ---- part 2: the real shape, 128^3 --------------------------------------------------------
rows128=()
b1_kib=0
for b in $batches_128; do
  avail=$(mem_available_kib)
  if [ "$b1_kib" -gt 0 ]; then need=$(( b1_kib * b * 5 / 4 + 1048576 )); else need=$(( 6 * 1048576 * b )); fi
  if [ "$avail" -lt "$need" ]; then
    echo "   128^3 B=$b skipped: needs about $((need / 1048576)) GiB, MemAvailable $((avail / 1048576)) GiB" >&2
    rows128+=("$(printf "%-6s %3d %2d %11s %11s %7s %9s %9s %7s  %-4s  (needs ~%d GiB, %d GiB available)" \
                  "128^3" "$b" "$threads_128" - - - - - - skip $((need / 1048576)) $((avail / 1048576)))")
    continue
  fi
  run "ours-128-$b" step_ms_median step_ms_median "$bench" "$modeldir/cosmoflow_128_k3.onnx" --loss mse \
    --threads "$threads_128" --batch "$b" --warmup 1 --steps "$steps_128" --lr 1e-4
  ms_ours=$sps kib_ours=$kib
  waited_total=$((waited_total + waited))
  echo "   128^3 B=$b T=$threads_128: ours  ${ms_ours} ms/step, $((kib / 1024)) MiB, ${wall}s (waited ${waited}s)" >&2
  run "torch-128-$b" step_ms_median step_ms_median env OMP_NUM_THREADS="$threads_128" MKL_NUM_THREADS="$threads_128" \
    "$py" "$here/bench/cosmoflow_torch.py" step --size 128 --kernel 3 --batch "$b" --threads "$threads_128" \
    --warmup 1 --steps "$steps_128"
  ms_torch=$sps kib_torch=$kib
  waited_total=$((waited_total + waited))
  echo "   128^3 B=$b T=$threads_128: torch ${ms_torch} ms/step, $((kib / 1024)) MiB, ${wall}s (waited ${waited}s)" >&2
  [ "$b" != 1 ] || b1_kib=$(( kib_ours > kib_torch ? kib_ours : kib_torch ))
  rows128+=("$(awk -v b="$b" -v t="$threads_128" -v o="$ms_ours" -v p="$ms_torch" -v mo="$kib_ours" -v mp="$kib_torch" 'BEGIN{
    r = o > 0 ? p / o : 0; mr = mp > 0 ? mo / mp : 0
    ok = (r >= 1.0 && mr <= 1.0)
    printf "%-6s %3d %2d %11.0f %11.0f %6.2fx %9.0f %9.0f %6.2fx  %-4s\n", "128^3", b, t, o, p, r, mo / 1024, mp / 1024, mr,
           ok ? "PASS" : "MISS"}')")
done

echo "== torch ${torch_version} (.venv-torch, PyPI wheel), channels_last_3d; ours: train_bench --loss mse (NCDHW);" \
     "nice ${NICE:-0}; load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(( $(date +%s) - t_start ))s" \
     "(of which ${waited_total}s waiting for idle CPUs)"
if [ "${#rows[@]}" -gt 0 ]; then
  echo "== throughput, CosmoFlow k=3: best of $rounds rounds; peak RSS = max of rounds (/usr/bin/time -v)"
  printf "%-6s %3s %2s %11s %11s %7s %9s %9s %7s  %-4s %9s\n" model B T "ours smp/s" "torch smp/s" ratio "ours MiB" \
    "torch MiB" ratio goal "cpu-time"
  for row in "${rows[@]}"; do
    echo "$row"
    case "$row" in *" MISS "*) missed=1 ;; esac
  done
  echo "(cpu-time: ratio of samples per second of process CPU time, steadier when the machine is shared)"
fi
if [ "${#rows128[@]}" -gt 0 ]; then
  echo "== the real shape: one training step (1 warm-up, median of $steps_128), peak RSS (/usr/bin/time -v)"
  printf "%-6s %3s %2s %11s %11s %7s %9s %9s %7s  %-4s\n" model B T "ours ms" "torch ms" speed "ours MiB" "torch MiB" ratio goal
  for row in "${rows128[@]}"; do
    echo "$row"
    case "$row" in *" MISS"*) missed=1 ;; esac
  done
  echo "(speed: torch's step time / ours, > 1 when ours is faster)"
fi
echo "goals: >= 1.0x torch's samples/s; peak RSS <= torch's"
if [ "$failed" = 1 ]; then echo "goals: a run FAILED"; exit 2; fi
if [ "$missed" = 1 ]; then echo "goals: NOT met"; exit 1; fi
echo "goals: met"
