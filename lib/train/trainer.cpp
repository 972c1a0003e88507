#include "train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/xxhash.h"
#include "data/epoch_plan.h"
#include "data/loader.h"
#include "data/source.h"
#include "dist/exchange.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/proto_tensor.h"
#include "nn/threads.h"
#include "onnx/model.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace hpcnn::train {

using nlohmann::json;

namespace {

std::atomic<bool> g_stop{false};

int local_ranks(const dist::Communicator& comm) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(var)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  return comm.size();
}

void set_threads(const TrainConfig& cfg, const dist::Communicator& comm) {
  int n = cfg.threads;
  if (n == 0) {
    n = std::max(1, nn::available_cores() / std::max(1, local_ranks(comm)));
  }
  nn::set_num_threads(n);
  if (cfg.deterministic) omp_set_dynamic(0);  // a fixed team size: bitwise-reproducible reductions
}

// Broadcasts every parameter and buffer from rank 0.
void broadcast_weights(nn::Model& model, dist::Communicator& comm) {
  for (auto& p : model.parameters()) comm.broadcast(p.value.data(), p.value.bytes(), 0);
  for (auto& b : model.buffers()) comm.broadcast(b.value.data(), b.value.bytes(), 0);
}

uint64_t weights_checksum(nn::Model& model) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  for (auto& p : model.parameters()) XXH64_update(st, p.value.data(), p.value.bytes());
  for (auto& b : model.buffers()) XXH64_update(st, b.value.data(), b.value.bytes());
  const uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return h;
}

void compare_checksums(nn::Model& model, dist::Communicator& comm, const std::string& when) {
  const auto all = comm.allgather(weights_checksum(model));
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      throw_error(ErrorKind::device, "the weights of rank " + std::to_string(r) + " differ from rank 0's " + when +
                                         " (checksums " + std::to_string(all[r]) + " vs " + std::to_string(all[0]) + ")");
}

data::AugmentOptions augment_options(const TrainConfig& cfg) {
  data::AugmentOptions a;
  a.pad = cfg.augmentation.crop_padding;
  a.flip = cfg.augmentation.horizontal_flip;
  a.mean = cfg.augmentation.mean;
  a.std = cfg.augmentation.std;
  return a;
}

std::shared_ptr<const data::SampleSource> open(const std::string& images, const std::string& labels, bool cache,
                                               const char* what) {
  if (images.empty()) throw_error(ErrorKind::usage, std::string("configuration key 'data.") + what + "_images' is required");
  data::DataFiles f;
  f.images = {images};
  if (!labels.empty()) f.labels = {labels};
  f.cache = cache;
  return data::open_source(f);
}

struct EvalSums {
  double loss = 0, top1 = 0, top5 = 0, count = 0;
};

// Test-set evaluation: each rank runs its shard, the sums are allreduced.
EvalSums evaluate_test(nn::Model& model, const TrainConfig& cfg, dist::Communicator& comm,
                       const std::shared_ptr<const data::SampleSource>& test) {
  data::LoaderOptions o;
  o.mode = data::LoaderMode::evaluate;
  o.batch_size = cfg.eval_batch_size;
  o.rank = comm.rank();
  o.world_size = comm.size();
  o.seed = cfg.seed;
  o.prefetch = cfg.data.prefetch;
  o.augment = augment_options(cfg);
  o.augment_enabled = false;
  data::BatchLoader loader(test, o);
  loader.start_epoch(0);
  double s[4] = {0, 0, 0, 0};
  while (auto b = loader.next_batch()) {
    auto out = model.forward({b->images}, nn::Mode::inference);
    const auto l = nn::softmax_cross_entropy(out.at(0), b->labels, 0.0f, nullptr);
    const double n = static_cast<double>(b->labels.size());
    s[0] += l.loss * n;
    s[1] += static_cast<double>(l.correct1);
    s[2] += static_cast<double>(l.correct5);
    s[3] += n;
  }
  comm.allreduce_sum(s, 4);
  return {s[0], s[1], s[2], s[3]};
}

std::map<std::string, Tensor> dense_state(const std::vector<nn::Parameter>& params, const dist::ParamLayout& layout,
                                          const std::vector<float>& state) {
  std::map<std::string, Tensor> out;
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor t = Tensor::zeros(params[k].value.shape());
    dist::unpack(layout, k, state.data(), t);
    out[params[k].name] = t;
  }
  return out;
}

void restore_state(const std::vector<nn::Parameter>& params, const dist::ParamLayout& layout,
                   const std::map<std::string, Tensor>& saved, std::vector<float>& state, const std::string& path) {
  for (size_t k = 0; k < params.size(); ++k) {
    auto it = saved.find(params[k].name);
    if (it == saved.end()) throw_error(ErrorKind::bad_input, "checkpoint " + path + " has no optimizer state for '" + params[k].name + "'");
    if (it->second.shape() != params[k].value.shape())
      throw_error(ErrorKind::bad_input, "checkpoint " + path + ": optimizer state of '" + params[k].name + "' has shape " +
                                            shape_to_string(it->second.shape()));
    dist::pack(layout, k, it->second, state.data());
  }
}

// Fault injection for the failure tests: HPCNN_TEST_FAULT="RANK:KIND:STEP" makes rank RANK, at
// optimizer step STEP (0-based, global), produce a NaN loss (KIND nan), throw (throw) or kill
// itself with SIGKILL (kill). Unset in normal runs.
struct Fault {
  int rank = -1;
  std::string kind;
  int64_t step = -1;
};

Fault read_fault() {
  Fault f;
  const char* v = std::getenv("HPCNN_TEST_FAULT");
  if (!v) return f;
  const std::string s(v);
  const auto a = s.find(':'), b = s.rfind(':');
  if (a == std::string::npos || b == a) return f;
  f.rank = std::atoi(s.substr(0, a).c_str());
  f.kind = s.substr(a + 1, b - a - 1);
  f.step = std::atoll(s.substr(b + 1).c_str());
  return f;
}

class Progress {
 public:
  Progress(bool on, int64_t total, int64_t epoch, int64_t epochs) : on_(on), total_(total), epoch_(epoch), epochs_(epochs) {}
  void update(int64_t done, double loss) {
    if (!on_ || (done % 5 && done != total_)) return;
    const int width = 30;
    const int filled = total_ ? static_cast<int>(width * done / total_) : width;
    std::fprintf(stderr, "\repoch %lld/%lld [%s%s] %lld/%lld loss %.4f", static_cast<long long>(epoch_ + 1),
                 static_cast<long long>(epochs_), std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), loss);
    if (done == total_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  bool on_;
  int64_t total_, epoch_, epochs_;
};

}  // namespace

void request_stop() { g_stop.store(true, std::memory_order_relaxed); }

json run_evaluation(const TrainConfig& cfg, dist::Communicator& comm, const std::string& model_path) {
  set_threads(cfg, comm);
  const std::string path = model_path.empty() ? cfg.model : model_path;
  nn::Model model = nn::Model::load(path);
  auto test = open(cfg.data.test_images, cfg.data.test_labels, cfg.data.cache, "test");
  const auto t0 = std::chrono::steady_clock::now();
  const EvalSums e = evaluate_test(model, cfg, comm, test);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return json{{"model", path},
              {"samples", static_cast<int64_t>(e.count)},
              {"test_accuracy", e.count ? e.top1 / e.count : 0.0},
              {"test_top5", e.count ? e.top5 / e.count : 0.0},
              {"test_loss", e.count ? e.loss / e.count : 0.0},
              {"seconds", secs},
              {"world_size", comm.size()}};
}

json run_training(const TrainConfig& cfg, dist::Communicator& comm, const RunOptions& run) {
  const int rank = comm.rank(), world = comm.size();
  set_threads(cfg, comm);
  const auto t_start = std::chrono::steady_clock::now();
  // Output folders that do not exist yet are created before any work (the rule of every tool).
  if (rank == 0)
    for (const std::string* out : {&cfg.output, &cfg.metrics, &cfg.checkpoint})
      if (!out->empty()) create_parent_folders(*out);

  // ---- model (from the checkpoint when resuming), identical on every rank
  Checkpoint ckpt;
  onnxu::Model loaded = onnxu::load_model(cfg.model);
  if (!run.resume.empty()) {
    ckpt = read_checkpoint(run.resume);
    loaded.proto = ckpt.model;
  }
  nn::Model model(loaded.proto, cfg.model, nn::ModelOptions{false, static_cast<unsigned>(cfg.seed)});
  if (model.input_names().size() != 1 || model.output_names().empty())
    throw_error(ErrorKind::unsupported, cfg.model + ": dist-train needs a model with one input (images) and logits as its first output");
  broadcast_weights(model, comm);
  compare_checksums(model, comm, "after the broadcast from rank 0");
  spdlog::info("model {}: {}", cfg.model, model.summary());

  // ---- gradient layout (dense or sparse) and optimizer
  std::vector<nn::Parameter>& params = model.parameters();
  dist::ParamLayout layout;
  if (!cfg.mask.empty()) {
    onnxu::Model mask_model = onnxu::load_model(cfg.mask);
    std::map<std::string, const onnx::TensorProto*> by_name;
    for (const auto& t : mask_model.proto.graph().initializer()) by_name[t.name()] = &t;
    std::vector<Tensor> masks;
    for (const auto& p : params) {
      auto it = by_name.find(p.name);
      masks.push_back(it != by_name.end() ? nn::tensor_from_proto(*it->second) : Tensor::full(p.value.shape(), 1.0f));
    }
    layout = dist::sparse_layout(params, &masks);
  } else if (cfg.sparse) {
    layout = dist::sparse_layout(params);
  } else {
    layout = dist::dense_layout(params);
  }
  dist::GradientExchange exchange(comm, layout);
  Optimizer optimizer(cfg.optimizer, exchange.layout());
  spdlog::info("gradient exchange: {} ({} of {} values, {} bytes per step)", layout.total < layout.full ? "sparse" : "dense",
               layout.total, layout.full, exchange.bytes_per_step());

  // ---- data
  auto train_src = open(cfg.data.train_images, cfg.data.train_labels, cfg.data.cache, "train");
  std::shared_ptr<const data::SampleSource> test_src;
  if (!cfg.data.test_images.empty()) test_src = open(cfg.data.test_images, cfg.data.test_labels, cfg.data.cache, "test");
  data::LoaderOptions lo;
  lo.mode = data::LoaderMode::train;
  lo.batch_size = cfg.batch_size;
  lo.rank = rank;
  lo.world_size = world;
  lo.seed = cfg.seed;
  lo.prefetch = cfg.data.prefetch;
  lo.augment = augment_options(cfg);
  data::BatchLoader loader(train_src, lo);
  const int64_t batches = loader.steps_per_epoch();
  int64_t steps_per_epoch = batches / cfg.accumulation_steps;
  if (cfg.max_steps_per_epoch > 0) steps_per_epoch = std::min(steps_per_epoch, cfg.max_steps_per_epoch);
  if (steps_per_epoch < 1)
    throw_error(ErrorKind::usage, "the training set (" + std::to_string(train_src->size()) + " samples) is too small for " +
                                      std::to_string(world) + " ranks x batch " + std::to_string(cfg.batch_size) +
                                      " x accumulation " + std::to_string(cfg.accumulation_steps));
  const int64_t global_batch = static_cast<int64_t>(world) * cfg.batch_size * cfg.accumulation_steps;
  spdlog::info("{} rank(s) x {} thread(s), global batch {}, {} steps per epoch, peak lr {:.4g}", world, nn::num_threads(),
               global_batch, steps_per_epoch, cfg.lr.peak(global_batch));

  // ---- resume position
  int64_t start_epoch = 0, start_step = 0, global_step = 0;
  if (!run.resume.empty()) {
    restore_state(params, layout, ckpt.optimizer_state, optimizer.state(), run.resume);
    start_epoch = ckpt.epoch;
    start_step = ckpt.step_in_epoch;
    global_step = ckpt.global_step;
    if (cfg.epochs <= start_epoch)
      throw_error(ErrorKind::usage, "checkpoint " + run.resume + " is at epoch " + std::to_string(start_epoch) + "; --epochs " +
                                        std::to_string(cfg.epochs) + " leaves nothing to train");
    if (start_step > 0 && (ckpt.world_size != world || ckpt.batch_size != cfg.batch_size)) {
      spdlog::warn("checkpoint {} was written mid-epoch with {} rank(s) x batch {}: epoch {} restarts from its beginning",
                   run.resume, ckpt.world_size, ckpt.batch_size, start_epoch + 1);
      global_step -= start_step;
      start_step = 0;
    }
    spdlog::info("resuming from {} at epoch {}, step {}", run.resume, start_epoch + 1, start_step);
  }

  std::ofstream metrics;
  if (rank == 0 && !cfg.metrics.empty()) {
    metrics.open(cfg.metrics, run.resume.empty() ? std::ios::trunc : std::ios::app);
    if (!metrics) throw_error(ErrorKind::io, "cannot write metrics file " + cfg.metrics);
  }
  auto save_checkpoint = [&](int64_t epoch, int64_t step_in_epoch) {
    if (cfg.checkpoint.empty()) return;
    if (rank == 0) {
      Checkpoint c;
      c.epoch = epoch;
      c.step_in_epoch = step_in_epoch;
      c.global_step = global_step;
      c.world_size = world;
      c.batch_size = cfg.batch_size;
      c.model = loaded.proto;
      model.export_weights(c.model);
      c.optimizer_state = dense_state(params, layout, optimizer.state());
      write_checkpoint(cfg.checkpoint, c);
      if (step_in_epoch == 0) spdlog::info("checkpoint written: {} (after epoch {})", cfg.checkpoint, epoch);
      else spdlog::info("checkpoint written: {} (epoch {}, step {})", cfg.checkpoint, epoch + 1, step_in_epoch);
    }
    comm.barrier();
  };

  auto sync_buffers = [&] {
    if (world == 1) return;
    for (auto& b : model.buffers()) {
      comm.allreduce_sum(b.value.data(), static_cast<size_t>(b.value.numel()));
      for (int64_t i = 0; i < b.value.numel(); ++i) b.value.data()[i] /= static_cast<float>(world);
    }
  };
  const Fault fault = read_fault();
  json last;
  double images_total = 0, train_seconds = 0;
  for (int64_t epoch = start_epoch; epoch < cfg.epochs; ++epoch) {
    const bool polish = epoch >= cfg.epochs - cfg.final_polish_epochs;
    loader.set_augment(!polish);
    loader.start_epoch(epoch);
    const int64_t first = epoch == start_epoch ? start_step : 0;
    for (int64_t i = 0; i < first * cfg.accumulation_steps; ++i) loader.next_batch();  // already trained
    Progress bar(run.progress && rank == 0, steps_per_epoch, epoch, cfg.epochs);
    double sums[3] = {0, 0, 0};  // loss * n, correct, n
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = first; step < steps_per_epoch; ++step) {
      model.zero_grad();
      for (int a = 0; a < cfg.accumulation_steps; ++a) {
        auto batch = loader.next_batch();
        if (!batch) throw_error(ErrorKind::bad_input, "rank " + std::to_string(rank) + ": the loader ran out of batches");
        model.set_seed(data::mix_seed(cfg.seed, static_cast<uint64_t>(rank), static_cast<uint64_t>(global_step * cfg.accumulation_steps + a)));
        auto out = model.forward({batch->images}, nn::Mode::training);
        if (fault.rank == rank && fault.step == global_step) {
          if (fault.kind == "nan") out.at(0).data()[0] = std::nanf("");
          if (fault.kind == "throw") throw_error(ErrorKind::io, "injected fault (HPCNN_TEST_FAULT) on rank " + std::to_string(rank));
          if (fault.kind == "kill") std::raise(SIGKILL);
        }
        Tensor grad;
        const auto l = nn::softmax_cross_entropy(out.at(0), batch->labels, cfg.label_smoothing, &grad);
        if (!std::isfinite(l.loss))
          throw_error(ErrorKind::bad_input, "rank " + std::to_string(rank) + ": the loss is " + std::to_string(l.loss) +
                                                " at epoch " + std::to_string(epoch + 1) + ", step " + std::to_string(step + 1) +
                                                " (diverged: lower lr.base or check the data)");
        std::vector<Tensor> grads(out.size());
        grads[0] = grad;
        model.backward(grads);
        const double n = static_cast<double>(batch->labels.size());
        sums[0] += l.loss * n;
        sums[1] += static_cast<double>(l.correct1);
        sums[2] += n;
      }
      exchange.exchange(params, cfg.accumulation_steps);
      const double lr = cfg.lr.at(epoch, step, steps_per_epoch, cfg.epochs, global_batch);
      optimizer.step(params, exchange.fused(), static_cast<float>(lr));
      ++global_step;
      bar.update(step + 1, sums[2] ? sums[0] / sums[2] : 0.0);
      int64_t stop = g_stop.load(std::memory_order_relaxed) ? 1 : 0;
      comm.allreduce_max(&stop, 1);
      if (stop) {
        spdlog::warn("stop requested (SIGTERM): checkpointing at epoch {}, step {}", epoch + 1, step + 1);
        sync_buffers();
        save_checkpoint(step + 1 == steps_per_epoch ? epoch + 1 : epoch, step + 1 == steps_per_epoch ? 0 : step + 1);
        return json{{"stopped", true}, {"epoch", epoch + 1}, {"step", global_step}, {"checkpoint", cfg.checkpoint}};
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    comm.allreduce_sum(sums, 3);
    double secs_mean = secs;
    comm.allreduce_sum(&secs_mean, 1);
    secs_mean /= world;
    images_total += sums[2];
    train_seconds += secs_mean;
    // BatchNormalization running statistics saw only this rank's batches: average them (as
    // they would be over the global batch, up to the variance of the batch means), so that
    // every rank holds the same model.
    sync_buffers();
    compare_checksums(model, comm, "after epoch " + std::to_string(epoch + 1));
    json m{{"epoch", epoch + 1},
           {"step", global_step},
           {"lr", cfg.lr.at(epoch, steps_per_epoch - 1, steps_per_epoch, cfg.epochs, global_batch)},
           {"train_loss", sums[2] ? sums[0] / sums[2] : 0.0},
           {"train_accuracy", sums[2] ? sums[1] / sums[2] : 0.0},
           {"images_per_second", secs_mean > 0 ? sums[2] / secs_mean : 0.0},
           {"seconds", secs_mean},
           {"final_polish", polish},
           {"bytes_exchanged_per_step", exchange.bytes_per_step()}};
    if (test_src) {
      const EvalSums e = evaluate_test(model, cfg, comm, test_src);
      m["test_loss"] = e.count ? e.loss / e.count : 0.0;
      m["test_accuracy"] = e.count ? e.top1 / e.count : 0.0;
      m["test_top5"] = e.count ? e.top5 / e.count : 0.0;
    }
    if (rank == 0) {
      spdlog::info("epoch {}/{}: train loss {:.4f} acc {:.4f}{}, {:.0f} images/s, {:.1f} s", epoch + 1, cfg.epochs,
                   m["train_loss"].get<double>(), m["train_accuracy"].get<double>(),
                   test_src ? fmt::format(", test acc {:.4f}", m["test_accuracy"].get<double>()) : std::string(),
                   m["images_per_second"].get<double>(), secs_mean);
      if (metrics.is_open()) {
        metrics << m.dump() << '\n';
        metrics.flush();
      }
    }
    last = m;
    const bool last_epoch = epoch + 1 == cfg.epochs;
    if (cfg.checkpoint_interval > 0 && ((epoch + 1) % cfg.checkpoint_interval == 0 || last_epoch)) save_checkpoint(epoch + 1, 0);
  }

  if (!cfg.output.empty()) {
    if (rank == 0) {
      onnx::ModelProto out = loaded.proto;
      model.export_weights(out);
      onnxu::save_model(out, cfg.output);
      spdlog::info("trained model written: {}", cfg.output);
    }
    comm.barrier();
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  json summary{{"model", cfg.model},
               {"output", cfg.output},
               {"world_size", world},
               {"threads_per_rank", nn::num_threads()},
               {"global_batch", global_batch},
               {"epochs", cfg.epochs},
               {"steps", global_step},
               {"gradient_exchange", layout.total < layout.full ? "sparse" : "dense"},
               {"bytes_exchanged_per_step", exchange.bytes_per_step()},
               {"dense_bytes_per_step", layout.full * sizeof(float)},
               {"train_images_per_second", train_seconds > 0 ? images_total / train_seconds : 0.0},
               {"seconds", total}};
  for (const char* k : {"train_loss", "train_accuracy", "test_loss", "test_accuracy", "test_top5"})
    if (last.contains(k)) summary[k] = last[k];
  return summary;
}

}  // namespace hpcnn::train
