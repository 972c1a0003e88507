// Benchmark of the CPU training engine: training-step throughput of an ONNX CNN.
// usage: train_bench MODEL.onnx [--threads T] [--batch B] [--warmup W] [--steps S] [--lr LR] [--seed N]
//                    [--loss ce|mse]
// Loads the model (onnx/model.h) into an nn::Model, sets T intra-op threads (nn/threads.h;
// 0 = all cores), and trains on one fixed random batch [B, ...] (the rest of the shape from the
// model's input, any rank: [B, C, H, W] for images, [B, C, D, H, W] for volumes such as the
// CosmoFlow models; a 4-D input with unknown dims falls back to [B, 1, 28, 28]; N(0, 1) values).
// Each step: zero_grad, forward(Mode::training), the loss, backward, SGD step (momentum 0.9).
// --loss ce (default): random labels, softmax cross-entropy with label smoothing 0.1, as
// bench/bench_train_torch.py does in PyTorch. --loss mse: random float targets [B, K] uniform in
// [-1, 1] (K = the output width), mean squared error over all B * K values (nn/regression.h; PyTorch's
// F.mse_loss, gradient 2 (p - t) / (B K)), as bench/cosmoflow_torch.py throughput does.
// W warm-up steps, then S timed steps.
// Prints one JSON line on stdout: images/s (= samples/s) over the timed steps (and per second of process
// CPU time, a steadier figure on a shared machine), step times, first and last
// loss, resident memory after loading and after the forward, backward and SGD phases of the
// first step, and the peak resident memory of the process (getrusage). bench/bench_train.sh runs it.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/allocator.h"
#include "core/error.h"
#include "core/heap.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/regression.h"
#include "nn/threads.h"
#include "onnx/model.h"
#include "train/gradient_exchange.h"
#include "train/optimizer.h"

using namespace hpcnn;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "train_bench: error: %s\n"
               "usage: train_bench MODEL.onnx [--threads T] [--batch B] [--warmup W] [--steps S] "
               "[--lr LR] [--seed N] [--loss ce|mse]\n",
               msg);
  std::exit(1);
}

// Shape of the model's graph input `name` (any rank >= 2), with the batch set to `batch`;
// [batch, 1, 28, 28] when it is not found or has a dim other than the batch that is not known.
Shape input_shape(const onnx::ModelProto& proto, const std::string& name, int64_t batch) {
  for (const auto& in : proto.graph().input()) {
    if (in.name() != name) continue;
    Shape s;
    for (const auto& d : in.type().tensor_type().shape().dim()) s.push_back(d.has_dim_value() ? d.dim_value() : -1);
    if (s.size() < 2) break;
    s[0] = batch;
    if (std::any_of(s.begin() + 1, s.end(), [](int64_t d) { return d <= 0; })) break;
    return s;
  }
  return {batch, 1, 28, 28};
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// CPU time of the process (all threads), seconds.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Current resident memory (VmRSS), MiB.
double rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string key;
  double kib = 0;
  while (f >> key) {
    if (key == "VmRSS:") {
      f >> kib;
      break;
    }
    f.ignore(1 << 20, '\n');
  }
  return kib / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  int threads = 0, batch = 64, warmup = 3, steps = 10;
  unsigned seed = 0;
  float lr = 0.01f;
  std::string loss_kind = "ce";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--threads" && has_value)
      threads = std::atoi(argv[++i]);
    else if (a == "--batch" && has_value)
      batch = std::atoi(argv[++i]);
    else if (a == "--warmup" && has_value)
      warmup = std::atoi(argv[++i]);
    else if (a == "--steps" && has_value)
      steps = std::atoi(argv[++i]);
    else if (a == "--lr" && has_value)
      lr = std::strtof(argv[++i], nullptr);
    else if (a == "--seed" && has_value)
      seed = static_cast<unsigned>(std::atoi(argv[++i]));
    else if (a == "--loss" && has_value)
      loss_kind = argv[++i];
    else if (!a.empty() && a[0] == '-')
      usage(("unknown or incomplete option " + a).c_str());
    else if (path.empty())
      path = a;
    else
      usage("more than one model given");
  }
  if (path.empty()) usage("no model given");
  if (threads < 0 || batch < 1 || warmup < 0 || steps < 1) usage("bad --threads/--batch/--warmup/--steps");
  if (loss_kind != "ce" && loss_kind != "mse") usage(("--loss must be ce or mse, not " + loss_kind).c_str());
  const bool mse = loss_kind == "mse";

  try {
    retain_freed_memory();  // as dist-train does: a step's buffers stay in the heap for the next
    nn::set_num_threads(threads);
    // The ModelProto is dropped once the Model holds the weights, as torch holds no ONNX copy.
    Shape shape;
    nn::Model model = [&] {
      onnxu::Model m = onnxu::load_model(path);
      nn::Model nm(m.proto, path);
      shape = input_shape(m.proto, nm.input_names().at(0), batch);
      return nm;
    }();
    std::fprintf(stderr, "train_bench: %s: %s\n", path.c_str(), model.summary().c_str());

    std::mt19937 rng(seed + 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Tensor x(shape);
    for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = normal(rng);
    std::vector<int32_t> labels;  // drawn once the number of classes is known (--loss ce)
    Tensor targets;               // [B, K] in [-1, 1], drawn once K is known (--loss mse)
    Tensor grad;
    // The training path of dist-train in one process: fused gradients, then the SGD update.
    auto comm = dist::make_single_communicator();
    train::GradientExchange exchange(*comm, train::parameter_layout(model.parameters(), false));
    train::Optimizer sgd(train::OptimizerOptions{.type = "sgd", .momentum = 0.9f}, exchange.layout(), exchange.positions());

    // Resident memory after loading and after each phase of the first step.
    double rss[4] = {rss_mib(), 0, 0, 0};
    bool first_step = true;
    auto step = [&]() -> double {
      model.zero_grad();
      std::vector<Tensor> out = model.forward({x}, nn::Mode::training);
      if (first_step) rss[1] = rss_mib();
      const Tensor& logits = out.at(0);
      double loss_value = 0;
      if (mse) {
        if (targets.numel() == 0) {
          if (logits.rank() != 2) usage(("--loss mse needs an output [B, K], not " + shape_to_string(logits.shape())).c_str());
          std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
          targets = Tensor({logits.dim(0), logits.dim(1)});
          for (int64_t i = 0; i < targets.numel(); ++i) targets.data()[i] = uni(rng);
        }
        loss_value = nn::mean_squared_error(logits, targets, &grad).mse;
      } else {
        if (labels.empty()) {
          std::uniform_int_distribution<int32_t> cls(0, static_cast<int32_t>(logits.dim(1)) - 1);
          for (int i = 0; i < batch; ++i) labels.push_back(cls(rng));
          grad = Tensor(logits.shape());
        }
        loss_value = nn::softmax_cross_entropy(logits, labels, 0.1f, &grad).loss;
      }
      model.backward({grad});
      if (first_step) rss[2] = rss_mib();
      exchange.exchange(model.parameters(), 1);
      sgd.step(model.parameters(), exchange.fused(), lr);
      if (first_step) rss[3] = rss_mib();
      first_step = false;
      return loss_value;
    };

    double first_loss = 0, loss = 0;
    for (int i = 0; i < warmup; ++i) loss = step();
    std::vector<double> ms;
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) {
      const auto s0 = Clock::now();
      loss = step();
      if (i == 0) first_loss = loss;
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s0).count());
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu = cpu_seconds() - cpu0;
    std::sort(ms.begin(), ms.end());
    if (!std::isfinite(loss)) std::fprintf(stderr, "train_bench: warning: loss is %g\n", loss);
    std::printf(
        "{\"engine\": \"hpcnn\", \"model\": \"%s\", \"loss_kind\": \"%s\", \"input\": \"%s\", \"threads\": %d, \"batch\": %d, "
        "\"warmup\": %d, \"steps\": %d, "
        "\"seconds\": %.4f, \"cpu_seconds\": %.4f, \"images_per_s\": %.2f, \"images_per_cpu_s\": %.2f, "
        "\"step_ms_min\": %.2f, \"step_ms_median\": %.2f, \"loss_first\": %.5f, \"loss\": %.5f, "
        "\"rss_mib_load_fwd_bwd_sgd\": [%.1f, %.1f, %.1f, %.1f], \"peak_rss_mib\": %.1f, \"allocator\": \"%s\"}\n",
        path.c_str(), loss_kind.c_str(), shape_to_string(shape).c_str(), nn::num_threads(), batch, warmup, steps, seconds, cpu,
        steps * batch / seconds, steps * batch / cpu, ms.front(), ms[ms.size() / 2], first_loss, loss, rss[0], rss[1], rss[2],
        rss[3], peak_rss_mib(), tool::allocator_name().c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "train_bench: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_bench: error: %s\n", e.what());
    return 3;
  }
}
