#include "train/trainer.h"

#include <fmt/ranges.h>
#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "core/threads.h"
#include "core/xxhash.h"
#include "data/decompress.h"
#include "data/epoch_plan.h"
#include "data/loader.h"
#include "data/source.h"
#include "measure/evaluate.h"
#include "measure/input_shape.h"
#include "measure/node_cache.h"
#include "nn/evaluate.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/pipeline.h"
#include "nn/proto_tensor.h"
#include "nn/regression.h"
#include "nn/spatial.h"
#include "nn/threads.h"
#include "nn/zero_channels.h"
#include "onnx/compare.h"
#include "onnx/costs.h"
#include "onnx/model.h"
#include "ops/update.h"
#include "spatial/group.h"
#include "train/batchnorm_sync.h"
#include "train/checkpoint.h"
#include "train/gradient_exchange.h"
#include "train/optimizer.h"
#include "train/parameter_memory.h"
#include "train/pipeline_schedule.h"

namespace hpcnn::train {

using nlohmann::json;

namespace {

std::atomic<int> g_stop{0};  // the signal that asked for a stop, 0: none

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

void set_threads(const TrainConfig& cfg, const dist::Communicator& comm) {
  nn::set_num_threads(cfg.threads > 0 ? cfg.threads : default_thread_count(comm.local_size()));
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

// The evaluation options of a configuration (measure/evaluate.h); `slabs` > 1 for the trainer's
// depth-split model.
measure::EvalOptions eval_options(const TrainConfig& cfg, int slabs = 1) {
  measure::EvalOptions o;
  o.slabs = slabs;
  o.batch_size = cfg.eval_batch_size;
  o.seed = cfg.seed;
  o.prefetch = cfg.data.prefetch;
  o.normalise = cfg.augmentation;
  return o;
}

// The optimizer state per parameter, dense (zeros where a sparse layout keeps no state), on the host.
// `positions`: GradientExchange::positions() (i32, one per sparse buffer of the layout).
std::map<std::string, Tensor> dense_state(const std::vector<nn::Parameter>& params, const dist::FusedLayout& layout,
                                          const std::vector<Tensor>& positions, const Tensor& state) {
  const Tensor host = state.to(Device::cpu());
  std::map<std::string, Tensor> out;
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor t = Tensor::zeros(params[k].value.shape());
    const Tensor part = host.slice(static_cast<int64_t>(layout.offset[k]), static_cast<int64_t>(layout.count(k)));
    Tensor flat = t.reshaped({t.numel()});
    if (layout.dense[k])
      copy_into(part, flat);
    else
      ops::scatter(part, positions[k].to(Device::cpu()), flat);
    out[params[k].name] = t;
  }
  return out;
}

void restore_state(const std::vector<nn::Parameter>& params, const dist::FusedLayout& layout,
                   const std::vector<Tensor>& positions, const std::map<std::string, Tensor>& saved, Tensor& state,
                   const std::string& path) {
  Tensor host = Tensor::zeros({static_cast<int64_t>(layout.total)});
  for (size_t k = 0; k < params.size(); ++k) {
    auto it = saved.find(params[k].name);
    if (it == saved.end())
      throw_error(ErrorKind::bad_input, "checkpoint " + path + " has no optimizer state for '" + params[k].name + "'");
    if (it->second.shape() != params[k].value.shape())
      throw_error(ErrorKind::bad_input, "checkpoint " + path + ": optimizer state of '" + params[k].name + "' has shape " +
                                            shape_to_string(it->second.shape()));
    Tensor part = host.slice(static_cast<int64_t>(layout.offset[k]), static_cast<int64_t>(layout.count(k)));
    const Tensor flat = it->second.reshaped({it->second.numel()});
    if (layout.dense[k])
      copy_into(flat, part);
    else
      ops::gather(flat, positions[k].to(Device::cpu()), part);
  }
  copy_into(host, state);
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

// The training loop of dist-train, in the named steps of a run:
//   load_model -> build_exchange -> open_data -> restore_position ->
//   for each epoch: train_epoch (train_step: micro-batches forward/backward, exchange_gradients,
//   optimizer step, sync_batchnorm) -> end_epoch (checksums, evaluation, metrics, checkpoint)
//   -> finish (output model, summary).
class Trainer {
 public:
  Trainer(const TrainConfig& cfg, dist::Communicator& comm, const RunOptions& run)
      : cfg_(cfg),
        comm_(comm),
        run_(run),
        rank_(comm.rank()),
        world_(comm.size()),
        S_(cfg.spatial),
        slab_(comm.rank() % cfg.spatial),
        P_(cfg.pipeline),
        micro_(cfg.pipeline > 1 ? cfg.micro_batches : 1),
        replica_(cfg.pipeline > 1 ? comm.rank() % std::max(1, comm.size() / cfg.pipeline) : comm.rank() / cfg.spatial),
        replicas_(comm.size() / (cfg.spatial * cfg.pipeline)),
        fault_(read_fault()) {}

  json run() {
    set_threads(cfg_, comm_);
    t_start_ = std::chrono::steady_clock::now();
    load_model();
    build_exchange();
    open_data();
    restore_position();
    release_model_copies();
    if (rank_ == 0 && !cfg_.metrics.empty()) {
      metrics_.open(cfg_.metrics, run_.resume.empty() ? std::ios::trunc : std::ios::app);
      if (!metrics_) throw_error(ErrorKind::io, "cannot write metrics file " + cfg_.metrics);
    }
    for (int64_t epoch = start_epoch_; epoch < cfg_.epochs; ++epoch) {
      const EpochSums sums = train_epoch(epoch);
      if (stopped_) return json{{"stopped", true}, {"epoch", epoch + 1}, {"step", global_step_}, {"checkpoint", cfg_.checkpoint}};
      end_epoch(epoch, sums);
      epochs_run_ = epoch + 1;
      if (early_stop_) break;
    }
    return finish();
  }

 private:
  struct EpochSums {
    double loss = 0, correct = 0, count = 0, seconds = 0;
    double absolute_error = 0, values = 0;  // regression: sums over samples and targets
    int64_t steps = 0;                      // run in this epoch (fewer than steps_per_epoch_ when resumed mid-epoch)
    uint64_t halo_bytes = 0;                // spatial split: this rank's halo traffic and time in the epoch's steps
    double halo_seconds = 0;
    bool polish = false;
  };

  bool regression() const { return cfg_.task == "regression"; }

  // Once the model is built (and restored), the ModelProtos keep the graph for writing checkpoints
  // and the trained model (export_weights() fills the weights in) but not a second copy of the
  // weights: 35.6 MB per rank for CosmoFlow-128^3, twice that with a spatial split (the split
  // model's proto). The pipeline's whole_model() builds from loaded_.proto and keeps it whole.
  void release_model_copies() {
    if (S_ > 1) onnx::ModelProto().Swap(&split_.model);  // Clear() would keep the strings' capacity
    if (!pipe_) model_->release_exported_weights(loaded_.proto);
  }

  // The model (from the checkpoint when resuming), identical on every rank. Running statistics
  // of BatchNormalization follow the global batch exactly (sync_batchnorm).
  void load_model() {
    loaded_ = onnxu::load_model(cfg_.model);
    if (!run_.resume.empty()) {
      ckpt_ = read_checkpoint(run_.resume);
      // As load_model() does for the model file (a checkpoint written before it did so may still
      // hold Identity-forwarded initializers).
      onnxu::bypass_initializer_identities(ckpt_.model);
      // A checkpoint belongs to one model (graph and parameter shapes): resuming it with another
      // would train and write the checkpoint's model under the other's name.
      const std::string diff = onnxu::structure_difference(ckpt_.model, loaded_.proto);
      if (!diff.empty())
        throw_error(ErrorKind::usage, "checkpoint " + run_.resume + " belongs to the model " +
                                          (ckpt_.model_file.empty() ? std::string("it holds") : "'" + ckpt_.model_file + "'") +
                                          ", not to '" + cfg_.model + "' that the configuration names (" + diff +
                                          "): resume with the model it was written for, or start afresh without --resume "
                                          "(for --resume auto: remove the checkpoint or choose another checkpoint path)");
      loaded_.proto = ckpt_.model;
    }
    nn::ModelOptions mo{false, static_cast<unsigned>(cfg_.seed)};
    if (P_ > 1) load_pipeline_stage(mo);
    if (S_ > 1) {
      // Spatial split (nn/spatial.h): this rank runs slab rank mod S of replica rank / S.
      group_ = std::make_unique<spatial::SpatialGroup>(comm_, S_);
      split_ = nn::split_depth(loaded_.proto, cfg_.model, S_);
      mo.slabs = group_.get();
      std::string halos;
      for (const auto& h : split_.halos) halos += fmt::format("{}{} ({}+{})", halos.empty() ? "" : ", ", h.conv, h.lo, h.hi);
      spdlog::info("spatial split {}: {} groups of {} ranks, slabs of {} of {} planes; halo planes per conv: {}; gathered: {}; "
                   "{} halo bytes per sample forward (an interior rank)",
                   S_, replicas_, S_, split_.input_depth / S_, split_.input_depth, halos,
                   fmt::join(split_.gathered, ", "), split_.halo_bytes_per_sample());
    }
    model_ = std::make_unique<nn::Model>(S_ > 1 ? split_.model : P_ > 1 ? pipe_split_.stages[static_cast<size_t>(pipe_->stage())].model
                                                                         : loaded_.proto,
                                         cfg_.model, mo);
    if (pipe_) pipe_->set_model(*model_);
    if (loaded_.proto.graph().output_size() == 0 || (!pipe_ && model_->input_names().size() != 1) ||
        (pipe_ && pipe_split_.stages.front().inputs.size() != 1))
      throw_error(ErrorKind::unsupported, cfg_.model + ": dist-train needs a model with one input (images) and " +
                                              (regression() ? "its predictions" : "logits") + " as its first output");
    model_->set_batchnorm_statistics(nn::BatchNormStatistics::deferred);
    broadcast_weights(*model_, stage_comm());
    compare_checksums(*model_, stage_comm(), "after the broadcast from rank 0");
    spdlog::info("model {}: {}; {} parameters as every tool counts them (onnx/costs.h: the rest are other float constants)",
                 cfg_.model, model_->summary(),
                 onnxu::count_costs(onnxu::GraphView(loaded_.proto.graph()), onnxu::infer_shapes(loaded_.proto)).params);
  }

  // The gradient layout (dense, sparse, or a mask's), the exchange and the optimizer.
  void build_exchange() {
    std::vector<nn::Parameter>& params = model_->parameters();
    dist::FusedLayout layout;
    if (!pipe_fixed_.empty()) {
      layout = masked_channels_layout(params);
    } else if (!cfg_.mask.empty()) {
      std::vector<Tensor> masks = mask_model_masks(params);
      layout = parameter_layout(params, true, &masks);
    } else if (cfg_.sparse && !run_.resume.empty()) {
      // Resuming a sparse run: the kept positions are the non-zero weights or state of the
      // checkpoint (a kept weight that trained to exactly 0 keeps its place and its momentum).
      std::vector<Tensor> masks;
      for (const auto& p : params) {
        Tensor m = Tensor::zeros(p.value.shape());
        auto it = ckpt_.optimizer_state.find(p.name);
        const float* st = it != ckpt_.optimizer_state.end() && it->second.numel() == p.value.numel() ? it->second.data() : nullptr;
        for (int64_t i = 0; i < p.value.numel(); ++i)
          m.data()[i] = p.value.data()[i] != 0.0f || (st && st[i] != 0.0f) ? 1.0f : 0.0f;
        masks.push_back(m);
      }
      layout = parameter_layout(params, true, &masks);
    } else {
      layout = parameter_layout(params, cfg_.sparse);
    }
    exchange_ = std::make_unique<GradientExchange>(stage_comm(), layout, Device::cpu(), cfg_.exchange_algorithm);
    if (S_ > 1) replicate_gathered_gradients();
    optimizer_ = std::make_unique<Optimizer>(cfg_.optimizer, exchange_->layout(), exchange_->positions());
    spdlog::info("gradient exchange: {} ({} of {} values, {} bytes per step)", sparse() ? "sparse" : "dense",
                 exchange_->layout().total, exchange_->layout().full, exchange_->bytes_per_step());
  }

  // Spatial split: the parameters after the slab gather (CosmoFlow's Dense layers: 64% of the
  // gradient at 64^3, 47% at 128^3) have the same gradient on the S ranks of a group. When they
  // close the fused buffer, they are summed over the replicas only (GradientExchange::
  // set_replicated_suffix), so that a group does not move S copies of them; with one replica
  // (R = S) they are not exchanged at all. Only the parameters after the last slab layer's (in the
  // model's order) form that suffix: a gathered layer's parameter before it stays in the allreduce
  // over all ranks, which gives the same mean.
  void replicate_gathered_gradients() {
    const std::vector<nn::Parameter>& params = model_->parameters();
    const dist::FusedLayout& layout = exchange_->layout();
    size_t k0 = params.size();
    while (k0 > 0 && !split_.slab_initializers.count(params[k0 - 1].name)) --k0;
    if (k0 == params.size()) return;
    const size_t from = layout.offset[k0];  // offsets follow the parameters' order (dist/fused_layout.h)
    if (replicas_ > 1) replicas_comm_ = comm_.split(slab_, rank_);
    exchange_->set_replicated_suffix(from, replicas_comm_.get());
    spdlog::info("spatial split: the gradients of the {} parameters from {} on ({} values) are the same on the {} ranks of a group: {}",
                 params.size() - k0, params[k0].name, layout.total - from, S_,
                 replicas_ > 1 ? fmt::format("summed over the {} replicas only", replicas_) : std::string("one replica, not exchanged"));
  }

  // Per parameter: the tensor of the same name in the `mask` model (its zeros are the fixed mask),
  // or ones where that model has none.
  std::vector<Tensor> mask_model_masks(const std::vector<nn::Parameter>& params) const {
    onnxu::Model mask_model = onnxu::load_model(cfg_.mask);
    std::map<std::string, const onnx::TensorProto*> by_name;
    for (const auto& t : mask_model.proto.graph().initializer()) by_name[t.name()] = &t;
    std::vector<Tensor> masks;
    for (const auto& p : params) {
      auto it = by_name.find(p.name);
      masks.push_back(it != by_name.end() ? nn::tensor_from_proto(*it->second) : Tensor::full(p.value.shape(), 1.0f));
    }
    return masks;
  }

  // The layout of masked pipeline messages: the fixed mask (the `mask` model's zeros, or with
  // `sparse` the zero weights of rank >= 2) plus the entries that hold the masked channels at zero
  // (pipe_fixed_), which makes those biases and BatchNormalization parameters sparse too.
  dist::FusedLayout masked_channels_layout(std::vector<nn::Parameter>& params) {
    if (cfg_.sparse && !run_.resume.empty())
      throw_error(ErrorKind::usage,
                  "parallel.pipeline_masked_channels with sparse and --resume: not built (pipeline runs have no "
                  "checkpoints)");
    const std::vector<Tensor> from_mask = cfg_.mask.empty() ? std::vector<Tensor>{} : mask_model_masks(params);
    std::vector<Tensor> masks;
    std::vector<bool> eligible;
    const bool base = !cfg_.mask.empty() || cfg_.sparse;
    int64_t added = 0;
    for (size_t k = 0; k < params.size(); ++k) {
      const nn::Parameter& p = params[k];
      // Parameters of rank < 2 stay dense under `mask` and `sparse`: only the holders' entries fix them.
      Tensor m = !from_mask.empty() && p.value.rank() >= 2 ? from_mask[k] : Tensor::full(p.value.shape(), 1.0f);
      if (cfg_.mask.empty() && cfg_.sparse && p.value.rank() >= 2)
        for (int64_t i = 0; i < m.numel(); ++i) m.data()[i] = p.value.data()[i] != 0.0f ? 1.0f : 0.0f;
      bool mine = false;
      for (const auto& h : pipe_fixed_) {
        if (h.tensor != p.name) continue;
        const int64_t per = m.numel() / m.dim(0);
        float* slice = m.data() + h.channel * per;
        added += std::count_if(slice, slice + per, [](float v) { return v != 0.0f; });
        std::fill_n(slice, per, 0.0f);
        mine = true;
      }
      eligible.push_back((base && p.value.rank() >= 2) || mine);
      masks.push_back(std::move(m));
    }
    spdlog::info(
        "pipeline masked channels: {} parameter entries of this stage hold masked channels at zero and join the fixed mask",
        added);
    return parameter_layout(params, true, &masks, &eligible);
  }

  // The data must carry what the task trains on: class labels, or float targets as wide as the
  // model's output (checked before any step, so that nothing is written for a mismatch).
  void check_task(const data::SampleSource& src, const std::string& labels_key) const {
    if (regression()) {
      if (src.target_width() == 0)
        throw_error(ErrorKind::usage, "task regression trains on float targets: " + labels_key + " must name a float .npy [N, K] (" +
                                          src.origin() + (src.has_labels() ? " has integer class labels)" : " has none)"));
      measure::check_output_width(loaded_.proto, cfg_.model, src.target_width(), labels_key + " (" + src.origin() + ")");
    } else if (src.target_width() > 0) {
      throw_error(ErrorKind::usage, labels_key + " of " + src.origin() + " holds float regression targets, not class labels: set "
                                    "\"task\": \"regression\" (or give integer labels)");
    }
  }

  void open_data() {
    train_src_ =
        measure::open_node_cached(cfg_.data.train_images, cfg_.data.train_labels, cfg_.data, comm_, "train", &node_cache_);
    spdlog::info("data.node_cache {}: {}", cfg_.data.node_cache,
                 node_cache_.shared ? "the training data are decoded once per node and read from node-shared memory"
                                    : "every rank decodes its own copy (" + node_cache_.why + ")");
    measure::check_input_shape(loaded_.proto, cfg_.model, *train_src_);
    check_task(*train_src_, "data.train_labels");
    if (cfg_.data.validation_samples > 0) {
      auto [train, validation] = data::split_validation(train_src_, cfg_.data.validation_samples);
      train_src_ = train;
      validation_src_ = validation;
      spdlog::info("validation split: the last {} of {} training samples (not trained on)", validation_src_->size(),
                   train_src_->size() + validation_src_->size());
    }
    if (!cfg_.data.test_images.empty()) {
      test_src_ = measure::open_node_cached(cfg_.data.test_images, cfg_.data.test_labels, cfg_.data, comm_, "test");
      measure::check_input_shape(loaded_.proto, cfg_.model, *test_src_);
      check_task(*test_src_, "data.test_labels");
    }
    data::LoaderOptions lo;
    lo.mode = data::LoaderMode::train;
    lo.batch_size = cfg_.batch_size / micro_;  // pipeline: one micro-batch per loader batch
    lo.rank = replica_;  // the group's ranks read the same samples, each its slab
    lo.world_size = replicas_;
    lo.slab = slab_;
    lo.slabs = S_;
    lo.seed = cfg_.seed;
    lo.prefetch = cfg_.data.prefetch;
    lo.augment = cfg_.augmentation;
    loader_ = std::make_unique<data::BatchLoader>(train_src_, lo);
    steps_per_epoch_ = loader_->steps_per_epoch() / (cfg_.accumulation_steps * micro_);
    if (cfg_.max_steps_per_epoch > 0) steps_per_epoch_ = std::min(steps_per_epoch_, cfg_.max_steps_per_epoch);
    if (steps_per_epoch_ < 1)
      throw_error(ErrorKind::usage, "the training set (" + std::to_string(train_src_->size()) + " samples) is too small for " +
                                        std::to_string(replicas_) + " replicas x batch " + std::to_string(cfg_.batch_size) +
                                        " x accumulation " + std::to_string(cfg_.accumulation_steps));
    global_batch_ = static_cast<int64_t>(replicas_) * cfg_.batch_size * cfg_.accumulation_steps;
    spdlog::info("{} rank(s) x {} thread(s), global batch {}, {} steps per epoch, peak lr {:.4g}", world_, nn::num_threads(),
                 global_batch_, steps_per_epoch_, cfg_.lr.peak(global_batch_));
  }

  // Resuming: the optimizer state and the position (a checkpoint written mid-epoch with another
  // world size or batch restarts that epoch: the per-rank shards differ).
  void restore_position() {
    if (run_.resume.empty()) return;
    restore_state(model_->parameters(), exchange_->layout(), exchange_->positions(), ckpt_.optimizer_state, optimizer_->state(),
                  run_.resume);
    start_epoch_ = ckpt_.epoch;
    start_step_ = ckpt_.step_in_epoch;
    global_step_ = ckpt_.global_step;
    if (cfg_.epochs <= start_epoch_)
      throw_error(ErrorKind::usage, "checkpoint " + run_.resume + " is at epoch " + std::to_string(start_epoch_) + "; --epochs " +
                                        std::to_string(cfg_.epochs) + " leaves nothing to train");
    if (start_step_ > 0 && (ckpt_.world_size != world_ || ckpt_.batch_size != cfg_.batch_size)) {
      spdlog::warn("checkpoint {} was written mid-epoch with {} rank(s) x batch {}: epoch {} restarts from its beginning",
                   run_.resume, ckpt_.world_size, ckpt_.batch_size, start_epoch_ + 1);
      global_step_ -= start_step_;
      start_step_ = 0;
    }
    spdlog::info("resuming from {} at epoch {}, step {}", run_.resume, start_epoch_ + 1, start_step_);
  }

  EpochSums train_epoch(int64_t epoch) {
    EpochSums sums;
    sums.polish = epoch >= cfg_.epochs - cfg_.final_polish_epochs;
    loader_->set_augment(!sums.polish);
    loader_->start_epoch(epoch);
    const int64_t first = epoch == start_epoch_ ? start_step_ : 0;
    for (int64_t i = 0; i < first * cfg_.accumulation_steps * micro_; ++i) loader_->next_batch();  // already trained
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t halo_bytes0 = group_ ? group_->halo_bytes_sent() : 0;
    const double halo_seconds0 = group_ ? group_->halo_seconds() : 0.0;
    for (int64_t step = first; step < steps_per_epoch_; ++step) {
      train_step(epoch, step, sums);
      ++sums.steps;
      if (group_) {
        sums.halo_bytes = group_->halo_bytes_sent() - halo_bytes0;
        sums.halo_seconds = group_->halo_seconds() - halo_seconds0;
      }
      if (run_.on_step && rank_ == 0)
        run_.on_step(epoch, cfg_.epochs, step + 1, steps_per_epoch_, sums.count ? sums.loss / sums.count : 0.0);
      int64_t stop = g_stop.load(std::memory_order_relaxed);
      comm_.allreduce_max(&stop, 1);
      if (stop) {
        spdlog::warn("stop requested ({}): checkpointing at epoch {}, step {}", signal_name(static_cast<int>(stop)), epoch + 1,
                     step + 1);
        const bool end = step + 1 == steps_per_epoch_;
        save_checkpoint(end ? epoch + 1 : epoch, end ? 0 : step + 1);
        stopped_ = true;
        return sums;
      }
    }
    sums.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return sums;
  }

  // One optimizer step: the micro-batches' forward and backward (gradients summed), the
  // exchange, the update, and the BatchNormalization statistics of the global micro-batches.
  void train_step(int64_t epoch, int64_t step, EpochSums& sums) {
    if (pipe_) return pipeline_step(epoch, step, sums);
    model_->zero_grad();
    for (int a = 0; a < cfg_.accumulation_steps; ++a) {
      auto batch = loader_->next_batch();
      if (!batch) throw_error(ErrorKind::bad_input, "rank " + std::to_string(rank_) + ": the loader ran out of batches");
      // Dropout masks per replica: the ranks of a spatial group run the gathered layers alike.
      model_->set_seed(data::mix_seed(cfg_.seed, static_cast<uint64_t>(replica_),
                                      static_cast<uint64_t>(global_step_ * cfg_.accumulation_steps + a)));
      auto out = model_->forward({batch->images}, nn::Mode::training);
      inject_fault(out.at(0));
      Tensor grad;
      const double loss = regression() ? regression_loss(out.at(0), *batch, sums, grad) : classification_loss(out.at(0), *batch, sums, grad);
      if (!std::isfinite(loss))
        throw_error(ErrorKind::bad_input, "rank " + std::to_string(rank_) + ": the loss is " + std::to_string(loss) +
                                              " at epoch " + std::to_string(epoch + 1) + ", step " + std::to_string(step + 1) +
                                              " (diverged: lower lr.base or check the data)");
      std::vector<Tensor> grads(out.size());
      grads[0] = grad;
      model_->backward(grads);
      const double n = slab_ == 0 ? static_cast<double>(batch->images.dim(0)) : 0.0;  // a group counts its samples once
      sums.loss += loss * n;
      sums.count += n;
    }
    exchange_->exchange(model_->parameters(), cfg_.accumulation_steps);
    const double lr = cfg_.lr.at(epoch, step, steps_per_epoch_, cfg_.epochs, global_batch_);
    optimizer_->step(model_->parameters(), exchange_->fused(), static_cast<float>(lr));
    sync_batchnorm(model_->take_batch_moments());
    ++global_step_;
  }

  // The pipeline's step (train/pipeline_schedule.h): this rank's stage runs the replica's
  // micro-batches (one loader batch each) in the configured order; the last stage computes the
  // loss and counts the samples (the other stages add zeros to the epoch's sums).
  void pipeline_step(int64_t epoch, int64_t step, EpochSums& sums) {
    model_->zero_grad();
    std::vector<data::Batch> batches;
    for (int j = 0; j < micro_; ++j) {
      auto batch = loader_->next_batch();
      if (!batch) throw_error(ErrorKind::bad_input, "rank " + std::to_string(rank_) + ": the loader ran out of batches");
      batches.push_back(std::move(*batch));
    }
    PipelineRunner::StepIo io;
    io.input = [&](int j) { return batches[static_cast<size_t>(j)].images; };
    // The seeds of one process accumulating the micro-batches (Dropout masks match it where one
    // stage holds every Dropout node: each stage draws from its own generator).
    io.seed = [&](int j) {
      return data::mix_seed(cfg_.seed, static_cast<uint64_t>(replica_), static_cast<uint64_t>(global_step_ * micro_ + j));
    };
    io.loss = [&](int j, const Tensor& output, Tensor& grad) {
      const data::Batch& batch = batches[static_cast<size_t>(j)];
      Tensor out = output;
      inject_fault(out);
      const double loss = regression() ? regression_loss(out, batch, sums, grad) : classification_loss(out, batch, sums, grad);
      if (!std::isfinite(loss))
        throw_error(ErrorKind::bad_input, "rank " + std::to_string(rank_) + ": the loss is " + std::to_string(loss) +
                                              " at epoch " + std::to_string(epoch + 1) + ", step " + std::to_string(step + 1) +
                                              " (diverged: lower lr.base or check the data)");
      const double n = static_cast<double>(batch.images.dim(0));
      sums.loss += loss * n;
      sums.count += n;
      return loss;
    };
    auto moments = pipe_->step(micro_, cfg_.batch_size / micro_, io);
    exchange_->exchange(model_->parameters(), micro_);
    const double lr = cfg_.lr.at(epoch, step, steps_per_epoch_, cfg_.epochs, global_batch_);
    optimizer_->step(model_->parameters(), exchange_->fused(), static_cast<float>(lr));
    sync_batchnorm(std::move(moments));
    ++global_step_;
  }

  // Pipeline: this rank's stage of the split (nn/pipeline.h), its replica group, and the model
  // options of a stage (input gradients to send back, except on the first stage).
  void load_pipeline_stage(nn::ModelOptions& mo) {
    pipe_split_ = nn::split_pipeline(loaded_.proto, cfg_.model, P_, cfg_.pipeline_cuts);  // the model's errors first
    if (world_ % P_ != 0)
      throw_error(ErrorKind::usage, "parallel.pipeline " + std::to_string(P_) + " does not divide the " + std::to_string(world_) +
                                        " ranks (ranks = stages x replicas, stage-major)");
    pipe_ = std::make_unique<PipelineRunner>(comm_, pipe_split_, replicas_, cfg_.pipeline_schedule);
    mo.input_grads = pipe_->stage() > 0;
    std::vector<uint64_t> masked_bytes = cfg_.pipeline_masked_channels ? mask_pipeline_channels() : std::vector<uint64_t>();
    uint64_t cut_bytes = 0;
    for (size_t s = 0; s < pipe_split_.stages.size(); ++s) {
      const nn::PipelineStage& st = pipe_split_.stages[s];
      std::string crossing;
      for (const auto& v : st.outputs) crossing += (crossing.empty() ? "" : ", ") + v.name;
      spdlog::info("pipeline stage {}: {} node(s) {} .. {}, {} MACs per sample{}", s, st.nodes, st.first_node, st.last_node, st.macs,
                   s + 1 < pipe_split_.stages.size()
                       ? fmt::format("; sends {} ({} bytes per sample)", crossing, pipe_split_.cut_bytes_per_sample(s))
                       : std::string());
      if (s + 1 < pipe_split_.stages.size())
        cut_bytes += masked_bytes.empty() ? pipe_split_.cut_bytes_per_sample(s) : masked_bytes[s];
    }
    // Closed form of the stage-to-stage traffic of one replica's step: every cut's values, for
    // every sample of the batch, forward and (gradients) backward.
    pipe_bytes_closed_form_ = 2 * cut_bytes * static_cast<uint64_t>(cfg_.batch_size);
    spdlog::info("pipeline {} x {} replicas ({} schedule, cuts {}), {} micro-batches of {}; {} stage-to-stage bytes per replica "
                 "and step (closed form); bubble (P-1)/(m+P-1) = {:.3f}",
                 P_, replicas_, cfg_.pipeline_schedule, pipe_split_.named ? "named" : "balanced by MACs", micro_,
                 cfg_.batch_size / micro_, pipe_bytes_closed_form_,
                 static_cast<double>(P_ - 1) / static_cast<double>(micro_ + P_ - 1));
  }

  // Masked stage messages: the channels of each crossing value that are not structurally zero
  // (nn/zero_channels.h, on the whole model as every rank loaded it), the parameter entries that
  // hold the others at zero (pipe_fixed_; a `mask` model that keeps one of them is refused, naming
  // it), and the masked bytes per sample of each cut. The same on every rank.
  std::vector<uint64_t> mask_pipeline_channels() {
    const nn::ZeroChannels zc = nn::analyze_zero_channels(loaded_.proto, cfg_.model);
    std::map<std::string, std::vector<int64_t>> kept;
    std::set<nn::ZeroHolder> fixed;
    std::vector<uint64_t> bytes;
    int64_t left_out = 0;
    for (size_t s = 0; s + 1 < pipe_split_.stages.size(); ++s) {
      uint64_t b = 0;
      std::string line;
      for (const auto& v : pipe_split_.stages[s].outputs) {
        const int64_t C = v.sample_dims.empty() ? 0 : v.sample_dims[0];
        const std::vector<char> z = zc.zero(v.name);
        std::vector<int64_t> k;
        for (int64_t c = 0; c < C; ++c)
          if (z.size() != static_cast<size_t>(C) || !z[static_cast<size_t>(c)]) k.push_back(c);
        const int64_t per = C > 0 ? v.sample_elements() / C : 0;
        b += static_cast<uint64_t>(static_cast<int64_t>(k.size()) * per) * sizeof(float);
        line += fmt::format("{}'{}' {} of {} channels", line.empty() ? "" : ", ", v.name, k.size(), C);
        left_out += C - static_cast<int64_t>(k.size());
        if (static_cast<int64_t>(k.size()) < C) {
          for (const auto& h : zc.holders(v.name)) fixed.insert(h);
          kept[v.name] = std::move(k);
        }
      }
      spdlog::info("pipeline cut {} (masked channels): {}; {} bytes per sample (dense {})", s, line, b,
                   pipe_split_.cut_bytes_per_sample(s));
      bytes.push_back(b);
    }
    if (!cfg_.mask.empty()) {  // the mask model must not keep what holds a masked channel at zero
      const onnxu::Model mm = onnxu::load_model(cfg_.mask);
      std::map<std::string, const onnx::TensorProto*> by_name;
      for (const auto& t : mm.proto.graph().initializer()) by_name[t.name()] = &t;
      for (const auto& h : fixed) {
        auto it = by_name.find(h.tensor);
        if (it == by_name.end()) continue;
        const Tensor m = nn::tensor_from_proto(*it->second);
        const int64_t per = m.numel() / m.dim(0);
        const float* slice = m.data() + h.channel * per;
        if (m.rank() >= 2 && std::any_of(slice, slice + per, [](float x) { return x != 0.0f; }))
          throw_error(ErrorKind::usage, "parallel.pipeline_masked_channels: the mask " + cfg_.mask + " keeps channel " +
                                            std::to_string(h.channel) + " of '" + h.tensor + "' (node '" + h.node +
                                            "'), which holds a masked channel at zero: mask it too, or leave the mask out");
      }
    }
    pipe_fixed_.assign(fixed.begin(), fixed.end());
    spdlog::info(
        "pipeline masked channels: {} channel(s) over the cuts left out of the messages, held at zero by {} parameter "
        "entries (filters, biases, BatchNormalization scale and bias)",
        left_out, pipe_fixed_.size());
    pipe_->set_kept_channels(std::move(kept));
    return bytes;
  }

  dist::Communicator& stage_comm() { return pipe_ ? pipe_->replicas_comm() : comm_; }

  // The whole model with every stage's current weights, on every rank (evaluation and the output
  // model): each parameter and buffer broadcast from the first replica of the stage that holds it.
  nn::Model& whole_model() {
    if (!pipe_) return *model_;
    if (!whole_) whole_ = std::make_unique<nn::Model>(loaded_.proto, cfg_.model, nn::ModelOptions{false, static_cast<unsigned>(cfg_.seed)});
    std::map<std::string, int> owner;
    for (size_t s = 0; s < pipe_split_.stages.size(); ++s)
      for (const auto& t : pipe_split_.stages[s].model.graph().initializer()) owner.emplace(t.name(), static_cast<int>(s));
    std::map<std::string, Tensor*> mine;
    for (auto& p : model_->parameters()) mine[p.name] = &p.value;
    for (auto& b : model_->buffers()) mine[b.name] = &b.value;
    auto share = [&](const std::string& name, Tensor& value) {
      auto it = owner.find(name);
      if (it == owner.end()) return;  // read by no node
      const int root = it->second * replicas_;
      if (rank_ == root) copy_into(*mine.at(name), value);
      comm_.broadcast(value.data(), value.bytes(), root);
    };
    for (auto& p : whole_->parameters()) share(p.name, p.value);
    for (auto& b : whole_->buffers()) share(b.name, b.value);
    return *whole_;
  }

  // Per-stage pipeline figures of the epoch into the metrics line: stage-to-stage bytes per step
  // (per replica, measured; and the closed form), each stage's idle fraction (the time it waited
  // for a neighbour / its step time, mean over its replicas) against (P-1)/(m+P-1), recomputed
  // forwards per step, and the largest stash of stage inputs.
  void pipeline_metrics(json& m) {
    const PipelineCounters& c = pipe_->counters();
    const size_t P = static_cast<size_t>(P_);
    std::vector<double> v(4 * P + 1, 0.0);
    const size_t s = static_cast<size_t>(pipe_->stage());
    const double steps = static_cast<double>(std::max<int64_t>(1, c.steps - pipe_steps_at_epoch_start_));
    v[s] = (c.idle_seconds - pipe_idle_at_epoch_start_) / std::max(1e-12, c.step_seconds - pipe_step_seconds_at_epoch_start_) / replicas_;
    v[P + s] = static_cast<double>(c.recomputed - pipe_recomputed_at_epoch_start_) / steps / replicas_;
    v[2 * P + s] = static_cast<double>(c.peak_stashed_bytes) / replicas_;
    v[3 * P + s] = (c.step_seconds - pipe_step_seconds_at_epoch_start_) / steps / replicas_;
    v[4 * P] = static_cast<double>(c.bytes_sent - pipe_bytes_at_epoch_start_) / steps / replicas_;
    comm_.allreduce_sum(v.data(), v.size());
    pipe_bytes_at_epoch_start_ = c.bytes_sent;
    pipe_idle_at_epoch_start_ = c.idle_seconds;
    pipe_step_seconds_at_epoch_start_ = c.step_seconds;
    pipe_recomputed_at_epoch_start_ = c.recomputed;
    pipe_steps_at_epoch_start_ = c.steps;
    m["pipeline_bytes_per_step"] = v[4 * P];
    m["pipeline_bytes_per_step_closed_form"] = pipe_bytes_closed_form_;
    m["pipeline_idle_fraction"] = std::vector<double>(v.begin(), v.begin() + static_cast<long>(P));
    m["pipeline_bubble_closed_form"] = static_cast<double>(P_ - 1) / static_cast<double>(micro_ + P_ - 1);
    m["pipeline_recomputed_per_step"] = std::vector<double>(v.begin() + static_cast<long>(P), v.begin() + static_cast<long>(2 * P));
    m["pipeline_peak_stashed_bytes"] = std::vector<double>(v.begin() + static_cast<long>(2 * P), v.begin() + static_cast<long>(3 * P));
    m["pipeline_step_seconds"] = std::vector<double>(v.begin() + static_cast<long>(3 * P), v.begin() + static_cast<long>(4 * P));
  }

  double classification_loss(const Tensor& logits, const data::Batch& batch, EpochSums& sums, Tensor& grad) const {
    nn::check_labels(batch.labels, logits.dim(1),
                     [&](int64_t n) { return loader_->source().locate(batch.indices[static_cast<size_t>(n)]); });
    const auto l = nn::softmax_cross_entropy(logits, batch.labels, cfg_.label_smoothing, &grad);
    if (slab_ == 0) sums.correct += static_cast<double>(l.correct1);
    return l.loss;
  }

  double regression_loss(const Tensor& predictions, const data::Batch& batch, EpochSums& sums, Tensor& grad) const {
    const nn::RegressionLoss l = nn::mean_squared_error(predictions, batch.targets, &grad);
    if (slab_ == 0) {
      sums.absolute_error += l.sums.absolute_error;
      sums.values += l.sums.values;
    }
    return l.mse;
  }

  // The running statistics as one process training on the global batch would have them: each
  // micro-batch's moments are reduced exactly over the ranks (train/batchnorm_sync.h, shifted
  // by the current running mean), then applied in order with the node's momentum. Every rank
  // applies the same numbers, so the ranks' buffers stay identical.
  void sync_batchnorm(std::vector<std::vector<nn::ChannelMoments>> per_forward) {
    if (model_->batchnorm_layers().empty() || per_forward.empty()) return;
    const auto& layers = model_->batchnorm_layers();
    std::vector<std::vector<double>> shift(layers.size());
    for (size_t l = 0; l < layers.size(); ++l) {
      const Tensor& rm = model_->buffers()[layers[l].mean_buffer].value;
      shift[l].assign(rm.data(), rm.data() + rm.numel());
    }
    std::vector<nn::ChannelMoments*> all;
    std::vector<const std::vector<double>*> shifts;
    for (auto& forward : per_forward)
      for (size_t l = 0; l < forward.size(); ++l) {
        all.push_back(&forward[l]);
        shifts.push_back(&shift[l]);
      }
    if (stage_comm().size() > 1) allreduce_moments(stage_comm(), all, shifts);
    for (const auto& forward : per_forward)
      for (size_t l = 0; l < forward.size(); ++l)
        if (forward[l].count > 0) model_->update_running_statistics(l, forward[l]);
  }

  // After an epoch: every rank holds the same weights (checked), the test evaluation, the
  // metrics line, the checkpoint.
  void end_epoch(int64_t epoch, EpochSums sums) {
    double totals[5] = {sums.loss, sums.correct, sums.count, sums.absolute_error, sums.values};
    comm_.allreduce_sum(totals, 5);
    double secs_mean = sums.seconds;
    comm_.allreduce_sum(&secs_mean, 1);
    secs_mean /= world_;
    images_total_ += totals[2];
    train_seconds_ += secs_mean;
    compare_checksums(*model_, stage_comm(), "after epoch " + std::to_string(epoch + 1));
    json m{{"epoch", epoch + 1},
           {"step", global_step_},
           {"lr", cfg_.lr.at(epoch, steps_per_epoch_ - 1, steps_per_epoch_, cfg_.epochs, global_batch_)},
           {"train_loss", totals[2] ? totals[0] / totals[2] : 0.0},
           {regression() ? "train_mae" : "train_accuracy",
            regression() ? (totals[4] ? totals[3] / totals[4] : 0.0) : (totals[2] ? totals[1] / totals[2] : 0.0)},
           {"images_per_second", secs_mean > 0 ? totals[2] / secs_mean : 0.0},
           {"seconds", secs_mean},
           {"final_polish", sums.polish},
           {"bytes_exchanged_per_step", exchange_->bytes_per_step()}};
    if (S_ > 1) {
      // Halo bytes sent per training step by the rank that sent most (an interior rank: both
      // neighbours), and the most time a rank spent in the halo exchange per step (waiting for its
      // neighbours included): the share of the step that overlapping it could hide at most.
      int64_t halo = static_cast<int64_t>(sums.halo_bytes);
      comm_.allreduce_max(&halo, 1);
      int64_t halo_us = static_cast<int64_t>(sums.halo_seconds * 1e6);
      comm_.allreduce_max(&halo_us, 1);
      const double steps = static_cast<double>(std::max<int64_t>(1, sums.steps));
      m["halo_bytes_per_step"] = static_cast<double>(halo) / steps;
      m["halo_seconds_per_step"] = static_cast<double>(halo_us) * 1e-6 / steps;
      m["step_seconds"] = secs_mean / steps;
    }
    if (pipe_) pipeline_metrics(m);
    const char* metric = regression() ? "mae" : "accuracy";  // the one number per split in the log line
    if (validation_src_) {
      const nn::EvalResult e = nn::eval_result(measure::evaluate_samples(whole_model(), eval_options(cfg_, S_), comm_, validation_src_));
      m["validation_loss"] = e.mean_loss;
      m.update(measure::metrics_json(e, "validation_"));
      m.erase("validation_top5");
      // The same sums on every rank, hence the same decision.
      early_stop_ = cfg_.stop_at_validation_accuracy > 0 && e.top1 > cfg_.stop_at_validation_accuracy;
    }
    if (test_src_) {
      const nn::EvalResult e = nn::eval_result(measure::evaluate_samples(whole_model(), eval_options(cfg_, S_), comm_, test_src_));
      m["test_loss"] = e.mean_loss;
      m.update(measure::metrics_json(e, "test_"));
    }
    if (rank_ == 0) {
      auto split_metric = [&](const char* split) {
        return fmt::format(", {} {} {:.4f}", split, regression() ? "mae" : "acc",
                           m[std::string(split) + "_" + metric].get<double>());
      };
      spdlog::info("epoch {}/{}: train loss {:.4f} {} {:.4f}{}{}, {:.0f} images/s, {:.1f} s", epoch + 1, cfg_.epochs,
                   m["train_loss"].get<double>(), regression() ? "mae" : "acc",
                   m[regression() ? "train_mae" : "train_accuracy"].get<double>(),
                   validation_src_ ? split_metric("validation") : std::string(),
                   test_src_ ? split_metric("test") : std::string(), m["images_per_second"].get<double>(), secs_mean);
      if (early_stop_)
        spdlog::info("validation accuracy {:.4f} > {:.4f} (stop_at_validation_accuracy): stopping after epoch {}",
                     m["validation_accuracy"].get<double>(), cfg_.stop_at_validation_accuracy, epoch + 1);
      if (metrics_.is_open()) {
        metrics_ << m.dump() << '\n';
        metrics_.flush();
      }
    }
    last_ = m;
    const bool last_epoch = epoch + 1 == cfg_.epochs || early_stop_;
    if (cfg_.checkpoint_interval > 0 && ((epoch + 1) % cfg_.checkpoint_interval == 0 || last_epoch))
      save_checkpoint(epoch + 1, 0);
  }

  void save_checkpoint(int64_t epoch, int64_t step_in_epoch) {
    if (cfg_.checkpoint.empty()) return;
    if (rank_ == 0) {
      Checkpoint c;
      c.epoch = epoch;
      c.step_in_epoch = step_in_epoch;
      c.global_step = global_step_;
      c.world_size = world_;
      c.batch_size = cfg_.batch_size;
      std::error_code ec;
      c.model_file = std::filesystem::absolute(cfg_.model, ec).string();
      if (!cfg_.output.empty()) c.output = std::filesystem::absolute(cfg_.output, ec).string();
      c.model = loaded_.proto;
      model_->export_weights(c.model);
      c.optimizer_state = dense_state(model_->parameters(), exchange_->layout(), exchange_->positions(), optimizer_->state());
      write_checkpoint(cfg_.checkpoint, c);
      if (step_in_epoch == 0)
        spdlog::info("checkpoint written: {} (after epoch {})", cfg_.checkpoint, epoch);
      else
        spdlog::info("checkpoint written: {} (epoch {}, step {})", cfg_.checkpoint, epoch + 1, step_in_epoch);
    }
    comm_.barrier();
  }

  json finish() {
    if (!cfg_.output.empty()) {
      nn::Model& whole = whole_model();
      if (rank_ == 0) {
        onnx::ModelProto out = loaded_.proto;
        whole.export_weights(out);
        onnxu::save_model(out, cfg_.output);
        spdlog::info("trained model written: {}", cfg_.output);
      }
      comm_.barrier();
    }
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start_).count();
    json summary{{"model", cfg_.model},
                 {"output", cfg_.output},
                 {"world_size", world_},
                 {"threads_per_rank", nn::num_threads()},
                 {"global_batch", global_batch_},
                 {"epochs", cfg_.epochs},
                 {"epochs_run", epochs_run_},
                 {"stopped_early", early_stop_},
                 {"steps", global_step_},
                 {"gradient_exchange", sparse() ? "sparse" : "dense"},
                 {"bytes_exchanged_per_step", exchange_->bytes_per_step()},
                 {"dense_bytes_per_step", exchange_->layout().full * sizeof(float)},
                 {"train_images_per_second", train_seconds_ > 0 ? images_total_ / train_seconds_ : 0.0},
                 {"seconds", total}};
    const ParameterMemory mem = parameter_memory(model_->parameters(), *exchange_, *optimizer_);
    summary["parameter_memory"] = mem.to_json();
    if (rank_ == 0)
      spdlog::info("parameter memory per rank (bytes): weights {}, gradients {}, fused buffer {}, optimizer state {}, "
                   "positions {}; optimizer (fused + state + positions) {}",
                   mem.weights, mem.gradients, mem.fused, mem.state, mem.positions, mem.optimizer());
    summary["task"] = cfg_.task;
    summary["spatial_split"] = S_;
    // Rank 0's reads of sample bytes from data.train_images (the validation split held out of it
    // included); 0 when the samples are in memory (data.cache: read once, at the start).
    summary["train_file_bytes_read"] = train_src_->bytes_read();
    for (const char* k : {"halo_bytes_per_step", "halo_seconds_per_step", "step_seconds"})
      if (last_.contains(k)) summary[k] = last_[k];
    // The node-local data cache (measure/node_cache.h): the nodes that read the training data from
    // their node-shared copy, and the compressed files each rank decoded (one rank per node with it).
    const std::vector<uint64_t> cached = comm_.allgather(node_cache_.shared && comm_.local_rank() == 0 ? 1 : 0);
    summary["node_cache"] = {{"setting", cfg_.data.node_cache},
                             {"nodes", comm_.node_count()},
                             {"nodes_shared", std::accumulate(cached.begin(), cached.end(), uint64_t{0})},
                             {"files_decoded_by_rank", comm_.allgather(data::compressed_files_decoded())},
                             {"train_open_cpu_ms_by_rank",
                              comm_.allgather(static_cast<uint64_t>(node_cache_.decode_cpu_seconds * 1e3))}};
    if (pipe_) {
      summary["pipeline_stages"] = P_;
      summary["micro_batches"] = micro_;
      summary["pipeline_schedule"] = cfg_.pipeline_schedule;
      summary["pipeline_masked_channels"] = cfg_.pipeline_masked_channels;
      for (const char* k : {"pipeline_bytes_per_step", "pipeline_bytes_per_step_closed_form", "pipeline_idle_fraction",
                            "pipeline_bubble_closed_form", "pipeline_recomputed_per_step", "pipeline_peak_stashed_bytes",
                            "pipeline_step_seconds"})
        if (last_.contains(k)) summary[k] = last_[k];
    }
    for (const char* k : {"train_loss", "train_accuracy", "train_mae", "validation_loss", "validation_accuracy", "validation_mse",
                          "validation_mae", "validation_mae_per_target", "test_loss", "test_accuracy", "test_top5", "test_mse",
                          "test_mae", "test_mae_per_target"})
      if (last_.contains(k)) summary[k] = last_[k];
    return summary;
  }

  void inject_fault(Tensor& logits) const {
    if (fault_.rank != rank_ || fault_.step != global_step_) return;
    if (fault_.kind == "nan") logits.data()[0] = std::nanf("");
    if (fault_.kind == "throw") throw_error(ErrorKind::io, "injected fault (HPCNN_TEST_FAULT) on rank " + std::to_string(rank_));
    if (fault_.kind == "kill") std::raise(SIGKILL);
  }

  bool sparse() const { return exchange_->layout().total < exchange_->layout().full; }

  const TrainConfig& cfg_;
  dist::Communicator& comm_;
  const RunOptions& run_;
  const int rank_, world_;
  // spatial split: slab rank mod S of replica rank / S; pipeline: stage rank / D of replica rank mod D.
  const int S_, slab_, P_, micro_, replica_, replicas_;
  const Fault fault_;
  std::unique_ptr<spatial::SpatialGroup> group_;
  std::unique_ptr<dist::Communicator> replicas_comm_;  // spatial split: the ranks of slab rank mod S (GradientExchange)
  nn::PipelineSplit pipe_split_;
  std::unique_ptr<PipelineRunner> pipe_;
  std::unique_ptr<nn::Model> whole_;  // pipeline: the whole model, for evaluation and the output
  uint64_t pipe_bytes_closed_form_ = 0, pipe_bytes_at_epoch_start_ = 0;
  std::vector<nn::ZeroHolder> pipe_fixed_;  // masked pipeline channels: entries held at zero
  double pipe_idle_at_epoch_start_ = 0, pipe_step_seconds_at_epoch_start_ = 0;
  int64_t pipe_recomputed_at_epoch_start_ = 0, pipe_steps_at_epoch_start_ = 0;
  nn::SpatialSplit split_;
  std::chrono::steady_clock::time_point t_start_;
  onnxu::Model loaded_;
  Checkpoint ckpt_;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<GradientExchange> exchange_;
  std::unique_ptr<Optimizer> optimizer_;
  measure::NodeCacheUse node_cache_;  // of the training data
  std::shared_ptr<const data::SampleSource> train_src_, validation_src_, test_src_;
  std::unique_ptr<data::BatchLoader> loader_;
  int64_t steps_per_epoch_ = 0, global_batch_ = 0;
  int64_t start_epoch_ = 0, start_step_ = 0, global_step_ = 0;
  std::ofstream metrics_;
  json last_;
  double images_total_ = 0, train_seconds_ = 0;
  bool stopped_ = false, early_stop_ = false;
  int64_t epochs_run_ = 0;
};

}  // namespace

void request_stop(int signal) { g_stop.store(signal, std::memory_order_relaxed); }

json run_evaluation(const TrainConfig& cfg, dist::Communicator& comm, const std::string& model_path, const std::string& split) {
  if (split != "test" && split != "validation")
    throw_error(ErrorKind::usage, "evaluation split '" + split + "': expected test or validation");
  set_threads(cfg, comm);
  return measure::evaluate_model(model_path.empty() ? cfg.model : model_path, split, cfg.data, eval_options(cfg, cfg.spatial), comm);
}

json run_training(const TrainConfig& cfg, dist::Communicator& comm, const RunOptions& run) {
  return Trainer(cfg, comm, run).run();
}

std::string checkpoint_to_resume(const TrainConfig& cfg, dist::Communicator& comm) {
  if (cfg.checkpoint.empty())
    throw_error(ErrorKind::usage, "--resume auto needs a checkpoint path (--checkpoint or checkpoint.path in the configuration)");
  int32_t found = 0;
  if (comm.rank() == 0) {
    // Only a path that surely holds nothing starts fresh: when it cannot be looked at (a
    // permission error, say), the checkpoint is read, and that read names the error, instead of
    // a fresh start overwriting the training done.
    std::error_code ec;
    found = std::filesystem::exists(cfg.checkpoint, ec) || ec ? 1 : 0;
    if (found)
      spdlog::info("--resume auto: continuing from the checkpoint {}", cfg.checkpoint);
    else
      spdlog::info("--resume auto: no checkpoint at {} yet, starting fresh", cfg.checkpoint);
  }
  comm.broadcast(&found, sizeof found, 0);
  return found ? cfg.checkpoint : std::string();
}

}  // namespace hpcnn::train
