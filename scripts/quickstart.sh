#!/usr/bin/env bash
# Sets everything up from nothing, builds, and runs the main jobs on real input:
# prune-rate on the model-zoo ResNet-50 graph (ONNX 'light' model with seeded random weights),
# printing the JSON report and writing the pruned model to out/resnet50_pruned.onnx;
# huffgpu-encode on the Fashion-MNIST training images, verified with huffgpu-decode -t; then
# dist-train under mpirun (2 ranks) on Fashion-MNIST: 15 epochs of the example CNN
# (configs/fashion_mnist_cnn.json; about 12-16 minutes on 2 cores), writing
# out/fashion_mnist_cnn.trained.onnx and its metrics. QUICKSTART_SKIP_TRAINING=1 skips that part.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
t0=$SECONDS
bash "$here/scripts/setup.sh"
t1=$SECONDS
bash "$here/scripts/build.sh"
t2=$SECONDS
out="$here/out"
mkdir -p "$out"
"$here/.venv/bin/python" "$here/scripts/make_light_models.py" "$out/models" --models resnet50
"$here/build/tools/prune-rate/prune-rate" "$out/models/resnet50.onnx" --threshold 0.01 \
  -o "$out/resnet50_pruned.onnx" -f --report "$out/resnet50_rates.json"
cat "$out/resnet50_rates.json"
echo "quickstart: wrote $out/resnet50_pruned.onnx and $out/resnet50_rates.json" >&2

# huffgpu: compress the Fashion-MNIST training images (Debian's dataset-fashion-mnist), then verify.
gzip -dc /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz > "$out/train-images-idx3-ubyte"
"$here/build/tools/huffgpu-encode/huffgpu-encode" -f --json "$out/train-images-idx3-ubyte"
"$here/build/tools/huffgpu-decode/huffgpu-decode" -t --json "$out/train-images-idx3-ubyte.huf"

# dist-train: data-parallel training of the example CNN on Fashion-MNIST, 2 ranks under mpirun.
if [ "${QUICKSTART_SKIP_TRAINING:-0}" != 1 ]; then
  cd "$here"
  .venv/bin/python scripts/make_train_models.py build/models
  mpirun_root=()
  [ "$(id -u)" -ne 0 ] || mpirun_root=(--allow-run-as-root)
  mpirun "${mpirun_root[@]}" --oversubscribe -np 2 build/tools/dist-train/dist-train --config configs/fashion_mnist_cnn.json
fi
echo "quickstart: set-up $((t1 - t0)) s, build $((t2 - t1)) s, jobs $((SECONDS - t2)) s" >&2
