#!/usr/bin/env bash
# Benchmark: training-step throughput (images/s for forward + backward + SGD update, batch 64)
# and peak resident memory of the CPU training engine, side by side with PyTorch on the CPU
# (Debian's python3-torch, /usr/bin/python3) in the same run, for the two models of
# bench/bench_models.py (small Fashion-MNIST CNN, ResNet-18-like on 1x28x28).
# PyTorch runs at its best: channels_last, threads pinned by torch.set_num_threads,
# OMP_NUM_THREADS and OPENBLAS_NUM_THREADS (bench/bench_train_torch.py).
# For each model and thread count the two run interleaved (ours, torch, ours, torch, ...),
# each process under /usr/bin/time for its peak RSS; the best throughput of the rounds counts.
# Goals: ours >= 0.8x torch's images/s everywhere; ResNet-18-like peak RSS <= 1.5x torch's.
#
# Environment:
#   BUILD_DIR       build folder (default: <repo>/build); configured if needed, train_bench built
#   THREADS         thread counts to run (default: "1 $(nproc)")
#   MODELS          default: "fmnist_cnn resnet18"
#   ROUNDS          interleaved rounds per engine (default 2)
#   STEPS_fmnist_cnn, STEPS_resnet18, WARMUP_fmnist_cnn, WARMUP_resnet18: timed / warm-up steps
#   WAIT_IDLE       before each run, wait up to this many seconds for the other processes to
#                   leave the CPUs (< 10% busy for 3 s in a row; default 0: no wait)
#   NICE            run both engines under `nice -n NICE`, and give this session's scheduler
#                   autogroup that nice value too (with autogroups, nice alone does not act
#                   across sessions); e.g. -20 as root on a shared machine
#   TORCH_BLAS_DIR  folder with the libblas.so.3 torch should load (e.g. an unpacked
#                   libopenblas0-pthread); put first on torch's LD_LIBRARY_PATH
# Exit status: 0 when all goals are met, 1 when one is missed, 2 when a run failed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${BUILD_DIR:-$here/build}"
py=/usr/bin/python3
threads_list="${THREADS:-1 $(nproc)}"
threads_list=$(tr ' ' '\n' <<< "$threads_list" | awk 'NF && !seen[$0]++' | tr '\n' ' ')
models="${MODELS:-fmnist_cnn resnet18}"
rounds="${ROUNDS:-2}"
: "${STEPS_fmnist_cnn:=20}" "${WARMUP_fmnist_cnn:=3}" "${STEPS_resnet18:=5}" "${WARMUP_resnet18:=2}"

# ---- PyTorch (Debian's python3-torch) with OpenBLAS: installed here, not by setup.sh (the tests
# do not need them)
if ! "$py" -c "import torch" 2> /dev/null || ! dpkg-query -W -f='${Status}' libopenblas0-pthread 2> /dev/null | grep -q 'ok installed'; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "bench_train: installing python3-torch and libopenblas0-pthread" >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-torch libopenblas0-pthread >&2
fi

# ---- build and models -------------------------------------------------------------------
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >&2
fi
cmake --build "$build" --target train_bench -j "$(nproc)" >&2
bench="$build/bench/train_bench"
modeldir="$build/bench_models"
mkdir -p "$modeldir"
for m in $models; do
  if [ ! -s "$modeldir/$m.onnx" ] || [ "$here/bench/bench_models.py" -nt "$modeldir/$m.onnx" ]; then
    "$py" "$here/bench/bench_models.py" "$modeldir" --models "$m" --batch 64
  fi
done

if [ -n "${NICE:-}" ] && [ -w /proc/self/autogroup ]; then
  echo "$NICE" 2>/dev/null > /proc/self/autogroup || echo "   warning: cannot set the autogroup nice value" >&2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
maxf() { awk -v a="$1" -v b="$2" 'BEGIN{print (b > a ? b : a)}'; }
field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"}]*\)\"\{0,1\}[,}].*/\1/p" "$2" | head -1; }

# run NAME CMD...: runs CMD under /usr/bin/time; stdout (one JSON line) to $tmp/NAME.json,
# stderr to $tmp/NAME.err; sets ips (images/s, 0 on failure), ipc (images per CPU second) and
# kib (peak RSS).
run() {
  local name=$1; shift
  local waited=0 idle=0
  while [ "$waited" -lt "${WAIT_IDLE:-0}" ] && [ "$idle" -lt 3 ]; do
    if [ "$(busy_percent 1)" -le 10 ]; then idle=$((idle + 1)); else idle=0; fi
    waited=$((waited + 1))
  done
  if /usr/bin/time -f '%M' -o "$tmp/$name.time" nice -n "${NICE:-0}" "$@" > "$tmp/$name.json" 2> "$tmp/$name.err"; then
    ips=$(field images_per_s "$tmp/$name.json") ipc=$(field images_per_cpu_s "$tmp/$name.json")
  else
    echo "== $name failed:" >&2; tail -n 5 "$tmp/$name.err" >&2
    ips=0 ipc=0 failed=1
  fi
  kib=$(tail -n 1 "$tmp/$name.time")
}

# Percentage of the machine's CPU time in use over $1 (default 2) seconds (the cores may be shared;
# a busy machine skews the figures).
busy_percent() {
  local a b
  a=($(head -n 1 /proc/stat)); sleep "${1:-2}"; b=($(head -n 1 /proc/stat))
  awk -v u="$(( (b[1]+b[2]+b[3]+b[6]+b[7]) - (a[1]+a[2]+a[3]+a[6]+a[7]) ))" \
      -v i="$(( (b[4]+b[5]) - (a[4]+a[5]) ))" 'BEGIN{printf "%.0f", (u + i > 0) ? 100 * u / (u + i) : 0}'
}
busy=$(busy_percent)
echo "== $(nproc) cores:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); busy before the runs: ${busy}%"
[ "$busy" -le 10 ] || echo "   warning: other processes use the CPUs; throughput figures will be low and noisy" >&2
failed=0 missed=0 blas=""
rows=()
for m in $models; do
  eval "steps=\$STEPS_$m warmup=\$WARMUP_$m"
  for t in $threads_list; do
    best_ours=0 best_torch=0 mem_ours=0 mem_torch=0 cpu_ours=0 cpu_torch=0
    for r in $(seq "$rounds"); do
      run "ours-$m-$t-$r" "$bench" "$modeldir/$m.onnx" --threads "$t" --warmup "$warmup" --steps "$steps"
      echo "   $m T=$t round $r: ours  $ips img/s, $((kib / 1024)) MiB" >&2
      best_ours=$(maxf "$best_ours" "$ips") cpu_ours=$(maxf "$cpu_ours" "$ipc")
      [ "$kib" -gt "$mem_ours" ] && mem_ours=$kib
      run "torch-$m-$t-$r" env OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t" MKL_NUM_THREADS="$t" \
        LD_LIBRARY_PATH="${TORCH_BLAS_DIR:+$TORCH_BLAS_DIR:}${LD_LIBRARY_PATH:-}" \
        "$py" "$here/bench/bench_train_torch.py" "$m" --threads "$t" --warmup "$warmup" --steps "$steps"
      echo "   $m T=$t round $r: torch $ips img/s, $((kib / 1024)) MiB" >&2
      best_torch=$(maxf "$best_torch" "$ips") cpu_torch=$(maxf "$cpu_torch" "$ipc")
      [ "$kib" -gt "$mem_torch" ] && mem_torch=$kib
      [ -n "$blas" ] || blas=$(field blas "$tmp/torch-$m-$t-$r.json")
    done
    rows+=("$(awk -v m="$m" -v t="$t" -v o="$best_ours" -v p="$best_torch" -v mo="$mem_ours" -v mp="$mem_torch" \
                  -v co="$cpu_ours" -v cp="$cpu_torch" 'BEGIN{
      r = p > 0 ? o / p : 0; mr = mp > 0 ? mo / mp : 0; cr = cp > 0 ? co / cp : 0
      ok = (r >= 0.8); if (m == "resnet18" && mr > 1.5) ok = 0
      printf "%-11s %3d %10.1f %11.1f %6.2fx %9.0f %9.0f %6.2fx  %-4s %8.2fx\n", m, t, o, p, r, mo / 1024, mp / 1024, mr,
             ok ? "PASS" : "MISS", cr}')")
  done
done

echo "== torch BLAS: ${blas:-unknown}"
case "$blas" in
  */blas/libblas.so*) echo "   (the reference BLAS: torch's Linear layers run unoptimised; install libopenblas0-pthread" \
                           "or set TORCH_BLAS_DIR for torch at its best)" ;;
esac
echo "== batch 64; best of $rounds rounds; peak RSS = max of rounds (/usr/bin/time %M); nice ${NICE:-0}"
printf "%-11s %3s %10s %11s %7s %9s %9s %7s  %-4s %9s\n" model T "ours img/s" "torch img/s" ratio "ours MiB" \
  "torch MiB" ratio goal "cpu-time"
for row in "${rows[@]}"; do
  echo "$row"
  case "$row" in *" MISS "*) missed=1 ;; esac
done
echo "goals: >= 0.8x torch's images/s; resnet18 peak RSS <= 1.5x torch's"
echo "(cpu-time: ratio of images per second of process CPU time, steadier when the machine is shared)"
if [ "$failed" = 1 ]; then echo "goals: a run FAILED"; exit 2; fi
if [ "$missed" = 1 ]; then echo "goals: NOT met"; exit 1; fi
echo "goals: met"
