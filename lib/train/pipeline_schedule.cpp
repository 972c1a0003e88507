// The pipeline schedule of train/pipeline_schedule.h.
#include "train/pipeline_schedule.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "core/error.h"

namespace hpcnn::train {

std::vector<PipelineOp> pipeline_order(const std::string& schedule, int stage, int stages, int m) {
  std::vector<PipelineOp> ops;
  if (schedule == "gpipe") {
    for (int j = 0; j < m; ++j) ops.push_back({true, j});
    for (int j = m - 1; j >= 0; --j) ops.push_back({false, j});
  } else if (schedule == "1f1b") {
    const int warm = std::min(stages - 1 - stage, m);
    int f = 0, b = 0;
    for (; f < warm; ++f) ops.push_back({true, f});
    while (f < m) {
      ops.push_back({true, f++});
      ops.push_back({false, b++});
    }
    while (b < m) ops.push_back({false, b++});
  } else {
    throw_error(ErrorKind::usage, "pipeline schedule '" + schedule + "' is not one of: gpipe, 1f1b");
  }
  return ops;
}

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Tensor plain(const Tensor& t) { return t.layout() == Layout::plain ? t : to_layout(t, Layout::plain); }

using Kept = std::map<std::string, std::vector<int64_t>>;

// The kept channels of `v` (nullptr: it travels whole) and the elements per channel and sample.
const std::vector<int64_t>* kept_of(const Kept& kept, const nn::CrossingValue& v) {
  auto it = kept.find(v.name);
  return it == kept.end() ? nullptr : &it->second;
}
int64_t per_channel(const nn::CrossingValue& v) { return v.sample_elements() / v.sample_dims.at(0); }

// Elements of one message: every value's [mb, ...], or [mb, K, ...] of a masked one.
int64_t elements(const std::vector<nn::CrossingValue>& values, int64_t mb, const Kept& kept) {
  int64_t n = 0;
  for (const auto& v : values) {
    const auto* k = kept_of(kept, v);
    n += (k ? static_cast<int64_t>(k->size()) * per_channel(v) : v.sample_elements()) * mb;
  }
  return n;
}

// Copies `tensors` (plain, [mb, ...] each as `values` says; undefined: zeros) into `buf`, a
// masked value's kept channels only; `check_zero`: the channels left out must be exactly 0.
void pack(const std::vector<Tensor>& tensors, const std::vector<nn::CrossingValue>& values, int64_t mb, const Kept& kept,
          std::vector<float>& buf, const char* what, int stage, int micro, bool check_zero) {
  buf.assign(static_cast<size_t>(elements(values, mb, kept)), 0.0f);
  size_t off = 0;
  for (size_t k = 0; k < values.size(); ++k) {
    const nn::CrossingValue& v = values[k];
    const auto* kc = kept_of(kept, v);
    const size_t n = static_cast<size_t>(v.sample_elements() * mb);
    const size_t sent = kc ? static_cast<size_t>(static_cast<int64_t>(kc->size()) * per_channel(v) * mb) : n;
    if (k < tensors.size() && tensors[k].defined()) {
      const Tensor t = plain(tensors[k]);
      if (static_cast<size_t>(t.numel()) != n)
        throw_error(ErrorKind::bad_input, std::string("pipeline stage ") + std::to_string(stage) + ": the " + what + " '" +
                                              v.name + "' has shape " + shape_to_string(t.shape()) + ", expected " +
                                              std::to_string(n) + " values (a micro-batch of " + std::to_string(mb) + ")");
      if (!kc) {
        std::copy_n(t.data(), n, buf.data() + off);
      } else {
        const int64_t C = v.sample_dims.at(0), hw = per_channel(v);
        float* dst = buf.data() + off;
        for (int64_t s = 0; s < mb; ++s) {
          size_t next = 0;  // index into the kept channels
          for (int64_t c = 0; c < C; ++c) {
            const float* src = t.data() + (s * C + c) * hw;
            if (next < kc->size() && (*kc)[next] == c) {
              dst = std::copy_n(src, hw, dst);
              ++next;
            } else if (check_zero && !std::all_of(src, src + hw, [](float x) { return x == 0.0f; })) {
              throw_error(ErrorKind::bad_input, "pipeline stage " + std::to_string(stage) + ": channel " + std::to_string(c) +
                                                    " of '" + v.name + "' (micro-batch " + std::to_string(micro) +
                                                    ") is masked but not zero: the parameters that held it at zero changed");
            }
          }
        }
      }
    }
    off += sent;
  }
}

std::vector<Tensor> unpack(const std::vector<float>& buf, const std::vector<nn::CrossingValue>& values, int64_t mb,
                           const Kept& kept) {
  std::vector<Tensor> out;
  size_t off = 0;
  for (const auto& v : values) {
    Shape s{mb};
    s.insert(s.end(), v.sample_dims.begin(), v.sample_dims.end());
    const auto* kc = kept_of(kept, v);
    if (!kc) {
      Tensor t(s);
      std::copy_n(buf.data() + off, t.numel(), t.data());
      off += static_cast<size_t>(t.numel());
      out.push_back(std::move(t));
      continue;
    }
    Tensor t = Tensor::zeros(s);
    const int64_t C = v.sample_dims.at(0), hw = per_channel(v);
    for (int64_t n = 0; n < mb; ++n)
      for (int64_t c : *kc) {
        std::copy_n(buf.data() + off, hw, t.data() + (n * C + c) * hw);
        off += static_cast<size_t>(hw);
      }
    out.push_back(std::move(t));
  }
  return out;
}

uint64_t bytes_of(const std::vector<Tensor>& ts) {
  uint64_t b = 0;
  for (const auto& t : ts)
    if (t.defined()) b += t.bytes();
  return b;
}

}  // namespace

struct PipelineRunner::Pending {
  std::vector<float> buf;
  std::unique_ptr<dist::Request> req;
};

PipelineRunner::PipelineRunner(dist::Communicator& world, const nn::PipelineSplit& split, int replicas, const std::string& schedule)
    : world_(world),
      split_(split),
      stages_(static_cast<int>(split.stages.size())),
      replicas_count_(replicas),
      stage_(world.rank() / replicas),
      replica_(world.rank() % replicas),
      schedule_(schedule) {
  pipeline_order(schedule_, 0, stages_, stages_);  // checks the name
  replicas_ = world.split(stage_, replica_);
}

PipelineRunner::~PipelineRunner() = default;

void PipelineRunner::set_kept_channels(std::map<std::string, std::vector<int64_t>> kept) {
  for (const auto& st : split_.stages)
    for (const auto& v : st.outputs) {
      auto it = kept.find(v.name);
      if (it == kept.end()) continue;
      const int64_t C = v.sample_dims.empty() ? 0 : v.sample_dims[0];
      for (size_t i = 0; i < it->second.size(); ++i)
        if (it->second[i] < 0 || it->second[i] >= C || (i > 0 && it->second[i] <= it->second[i - 1]))
          throw_error(ErrorKind::usage, "pipeline: the kept channels of '" + v.name + "' are not ascending within its " +
                                            std::to_string(C) + " channels");
    }
  kept_ = std::move(kept);
}

std::vector<std::vector<nn::ChannelMoments>> PipelineRunner::step(int m, int64_t mb, const StepIo& io) {
  if (!model_) throw_error(ErrorKind::usage, "PipelineRunner::step before set_model");
  const auto t_step = Clock::now();
  const nn::PipelineStage& st = split_.stages[static_cast<size_t>(stage_)];
  const int prev = world_.rank() - replicas_count_, next = world_.rank() + replicas_count_;
  const std::vector<PipelineOp> ops = pipeline_order(schedule_, stage_, stages_, m);
  if (2 * m + 1 >= 32768) throw_error(ErrorKind::usage, "parallel.micro_batches " + std::to_string(m) + " is over 16383 (MPI tags)");

  std::map<std::pair<bool, int>, Pending> recvs;  // (forward, micro) -> posted receive
  std::vector<Pending> sends;
  std::vector<std::vector<Tensor>> stash(static_cast<size_t>(m));
  std::vector<Tensor> loss_grad(static_cast<size_t>(m));
  std::vector<std::vector<nn::ChannelMoments>> moments(static_cast<size_t>(m));
  uint64_t stashed = 0;
  int last_forward = -1;

  auto post = [&](const PipelineOp& op) {
    if (op.forward ? first() : last()) return;  // no neighbour sends it
    const auto key = std::make_pair(op.forward, op.micro);
    if (recvs.count(key)) return;
    Pending& p = recvs[key];
    p.buf.resize(static_cast<size_t>(elements(op.forward ? st.inputs : st.outputs, mb, kept_)));
    p.req = world_.irecv(p.buf.data(), p.buf.size(), op.forward ? prev : next, 2 * op.micro + (op.forward ? 0 : 1));
  };
  auto receive = [&](const PipelineOp& op) {
    post(op);
    Pending& p = recvs.at({op.forward, op.micro});
    const auto t = Clock::now();
    p.req->wait();
    counters_.idle_seconds += since(t);
    std::vector<Tensor> out = unpack(p.buf, op.forward ? st.inputs : st.outputs, mb, kept_);
    recvs.erase({op.forward, op.micro});
    return out;
  };
  auto send = [&](const std::vector<Tensor>& tensors, const std::vector<nn::CrossingValue>& values, int peer, int tag, const char* what) {
    Pending p;
    pack(tensors, values, mb, kept_, p.buf, what, stage_, tag / 2, tag % 2 == 0);
    counters_.bytes_sent += p.buf.size() * sizeof(float);
    p.req = world_.isend(p.buf.data(), p.buf.size(), peer, tag);
    sends.push_back(std::move(p));
  };
  auto forward = [&](int j, const std::vector<Tensor>& inputs) {
    model_->set_seed(io.seed(j));
    auto out = model_->forward(inputs, nn::Mode::training);
    last_forward = j;
    return out;
  };

  for (size_t k = 0; k < ops.size(); ++k) {
    const PipelineOp op = ops[k];
    // Post the receives of the next forward and the next backward ahead of this operation.
    bool f = false, b = false;
    for (size_t l = k + 1; l < ops.size() && !(f && b); ++l) {
      if (ops[l].forward && !f) post(ops[l]), f = true;
      if (!ops[l].forward && !b) post(ops[l]), b = true;
    }
    const size_t j = static_cast<size_t>(op.micro);
    if (op.forward) {
      std::vector<Tensor> inputs;
      if (first()) {
        inputs.push_back(io.input(op.micro));
        if (inputs[0].dim(0) != mb)
          throw_error(ErrorKind::bad_input, "pipeline: micro-batch " + std::to_string(op.micro) + " has " +
                                                std::to_string(inputs[0].dim(0)) + " samples, expected " + std::to_string(mb));
      } else {
        inputs = receive(op);
      }
      auto out = forward(op.micro, inputs);
      auto mo = model_->take_batch_moments();
      if (!mo.empty()) moments[j] = std::move(mo.front());
      if (last()) {
        Tensor grad;
        io.loss(op.micro, plain(out.at(0)), grad);
        loss_grad[j] = grad;
      } else {
        send(out, st.outputs, next, 2 * op.micro, "output");
      }
      stash[j] = std::move(inputs);
      stashed += bytes_of(stash[j]);
      counters_.peak_stashed_bytes = std::max(counters_.peak_stashed_bytes, stashed);
    } else {
      std::vector<Tensor> grads;
      if (last()) {
        grads.resize(st.outputs.size());
        grads[0] = loss_grad[j];
      } else {
        grads = receive(op);
      }
      if (last_forward != op.micro) {  // re-materialise: the model holds another micro-batch's forward
        forward(op.micro, stash[j]);
        model_->take_batch_moments();  // counted once, at the original forward
        ++counters_.recomputed;
      }
      model_->backward(grads);
      last_forward = -1;
      if (!first()) send(model_->input_grads(), st.inputs, prev, 2 * op.micro + 1, "input gradient");
      stashed -= bytes_of(stash[j]);
      stash[j].clear();
      loss_grad[j] = Tensor();
    }
  }
  const auto t = Clock::now();
  for (auto& s : sends) s.req->wait();
  counters_.idle_seconds += since(t);
  counters_.step_seconds += since(t_step);
  ++counters_.steps;
  return moments;
}

}  // namespace hpcnn::train
