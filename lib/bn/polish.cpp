#include "bn/polish.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "data/loader.h"
#include "measure/input_shape.h"
#include "measure/sensitivity.h"
#include "nn/batchnorm_statistics.h"
#include "nn/model.h"
#include "nn/spatial.h"
#include "onnx/graph.h"
#include "onnx/tensor.h"
#include "spatial/group.h"

namespace hpcnn::bn {

namespace {

std::string node_label(const onnx::NodeProto& n) {
  return "node '" + (n.name().empty() ? (n.output_size() ? n.output(0) : std::string("?")) : n.name()) + "' (BatchNormalization)";
}

std::string node_name(const onnx::NodeProto& n) { return n.name().empty() && n.output_size() ? n.output(0) : n.name(); }

onnx::TensorProto* find_initializer(onnx::ModelProto& m, const std::string& name) {
  for (auto& t : *m.mutable_graph()->mutable_initializer())
    if (t.name() == name) return &t;
  return nullptr;
}

// Replaces the values of a FLOAT initializer, in the storage it used (raw_data or float_data).
void set_floats(onnx::TensorProto& t, const std::vector<double>& values) {
  std::vector<float> f(values.begin(), values.end());
  if (t.float_data_size() > 0) {
    t.clear_float_data();
    for (float v : f) t.add_float_data(v);
  } else {
    std::string raw(f.size() * sizeof(float), '\0');
    std::memcpy(raw.data(), f.data(), raw.size());  // little-endian hosts (x86-64, aarch64)
    t.set_raw_data(std::move(raw));
  }
}

// Per-channel moments of one batch of X ([N, C, ...], plain layout): count, mean, M2 in double.
nn::ChannelMoments batch_moments(const Tensor& x) {
  const int64_t N = x.dim(0), C = x.dim(1);
  int64_t inner = 1;
  for (int64_t d = 2; d < x.rank(); ++d) inner *= x.dim(d);
  nn::ChannelMoments m;
  m.count = static_cast<double>(N * inner);
  m.mean.assign(static_cast<size_t>(C), 0.0);
  m.m2.assign(static_cast<size_t>(C), 0.0);
  const float* p = x.data();
  for (int64_t c = 0; c < C; ++c) {
    double s = 0;
    for (int64_t n = 0; n < N; ++n) {
      const float* v = p + (n * C + c) * inner;
      for (int64_t i = 0; i < inner; ++i) s += v[i];
    }
    const double mean = s / m.count;
    double q = 0;
    for (int64_t n = 0; n < N; ++n) {
      const float* v = p + (n * C + c) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const double d = v[i] - mean;
        q += d * d;
      }
    }
    m.mean[static_cast<size_t>(c)] = mean;
    m.m2[static_cast<size_t>(c)] = q;
  }
  return m;
}

// The attributes that change what running_mean / running_var mean (ONNX operator spec,
// BatchNormalization versions 1-15): statistics are polished only where a runtime reads them.
//   training_mode = 1 (opset 14+): Y is normalised with the batch's own statistics; the running
//     ones are only updated, never read, so re-estimating them changes nothing the model computes.
//   spatial = 0 (opset 7-8): statistics per activation ([C, D1, ...]), not per channel.
//   is_test = 0 (opset 1-6): the node is in its training form, as training_mode = 1.
void check_inference_form(const onnx::NodeProto& n, const std::string& origin) {
  const std::string who = node_label(n) + " of " + origin;
  if (onnxu::attr_int(n, "training_mode", 0) != 0)
    throw_error(ErrorKind::unsupported,
                who +
                    " has training_mode = 1: by the ONNX spec it normalises with each batch's own statistics and never reads "
                    "running_mean/running_var, so polished statistics would change nothing; export it in inference form "
                    "(training_mode = 0, e.g. PyTorch's model.eval() before torch.onnx.export) and polish that");
  if (onnxu::attr_int(n, "spatial", 1) != 1)
    throw_error(ErrorKind::unsupported, who + " has spatial = 0: its statistics are per activation, not per channel");
  if (const auto* a = onnxu::find_attribute(n, "is_test"); a && a->i() == 0)
    throw_error(ErrorKind::unsupported,
                who + " has is_test = 0 (the training form of opset 1-6): its running statistics are not read");
}

}  // namespace

std::vector<BatchNormNode> batchnorm_passes(const onnx::ModelProto& model) {
  // level(value): the most BatchNorms on a path from a graph input to the value. ONNX graphs are
  // topologically sorted, so one walk in node order suffices.
  std::map<std::string, int> level;
  std::vector<BatchNormNode> out;
  const auto& g = model.graph();
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    int in = 0;
    for (const auto& v : n.input()) {
      auto it = level.find(v);
      if (it != level.end()) in = std::max(in, it->second);
    }
    const bool is_bn = n.op_type() == "BatchNormalization" && (n.domain().empty() || n.domain() == "ai.onnx");
    if (is_bn) out.push_back({i, in});
    for (const auto& v : n.output()) level[v] = in + (is_bn ? 1 : 0);
  }
  return out;
}

PolishResult polish_batchnorm(onnx::ModelProto& model, const std::string& origin,
                              std::shared_ptr<const data::SampleSource> samples, const PolishOptions& o,
                              dist::Communicator& comm) {
  if (o.batch_size < 1) throw_error(ErrorKind::usage, "the batch size must be >= 1");
  if (o.samples < 0) throw_error(ErrorKind::usage, "the number of samples must be >= 0");
  if (samples->size() == 0) throw_error(ErrorKind::bad_input, samples->origin() + " holds no samples");
  measure::check_input_shape(model, origin, *samples);
  if (o.samples > samples->size())
    throw_error(ErrorKind::usage, std::to_string(o.samples) + " samples asked for, but " + samples->origin() + " holds " +
                                      std::to_string(samples->size()));
  const int64_t K = o.samples > 0 ? o.samples : samples->size();
  const int64_t B = (K + o.batch_size - 1) / o.batch_size;

  PolishResult result;
  result.samples = K;
  result.batches = B;
  const std::vector<BatchNormNode> nodes = batchnorm_passes(model);
  if (nodes.empty()) return result;

  // The statistics initializers: float, and each used by one node only.
  std::map<std::string, std::string> owner;
  for (const auto& bn : nodes) {
    const auto& n = model.graph().node(bn.node);
    if (n.input_size() < 5) throw_error(ErrorKind::bad_input, node_label(n) + " of " + origin + " has fewer than 5 inputs");
    check_inference_form(n, origin);
    for (int k : {3, 4}) {
      const std::string& name = n.input(k);
      const onnx::TensorProto* t = find_initializer(model, name);
      if (!t || t->data_type() != onnx::TensorProto::FLOAT)
        throw_error(ErrorKind::unsupported, node_label(n) + " of " + origin + ": its " +
                                                (k == 3 ? "running_mean" : "running_var") + " '" + name +
                                                "' is not a float initializer");
      auto [it, fresh] = owner.emplace(name, node_label(n));
      if (!fresh)
        throw_error(ErrorKind::unsupported, node_label(n) + " of " + origin + " shares its statistics '" + name + "' with " +
                                                it->second + ": they cannot be re-estimated separately");
    }
  }
  for (const auto& bn : nodes) {
    const auto& n = model.graph().node(bn.node);
    LayerStatistics s;
    s.node = node_name(n);
    s.input = n.input(0);
    s.pass = bn.pass;
    s.old_mean = onnxu::to_doubles(*find_initializer(model, n.input(3)));
    s.old_var = onnxu::to_doubles(*find_initializer(model, n.input(4)));
    s.channels = static_cast<int64_t>(s.old_mean.size());
    result.layers.push_back(std::move(s));
  }
  result.passes = 1 + std::max_element(nodes.begin(), nodes.end(), [](auto& a, auto& b) { return a.pass < b.pass; })->pass;

  const int S = std::max(1, o.slabs), slab = comm.rank() % S;
  std::unique_ptr<spatial::SpatialGroup> group;  // checks that S divides the world size
  if (S > 1) group = std::make_unique<spatial::SpatialGroup>(comm, S);
  const int replica = comm.rank() / S, replicas = comm.size() / S;

  measure::SensitivityOptions lo;
  lo.batches = B;
  lo.batch_size = o.batch_size;
  lo.normalise = o.normalise;
  const auto range = std::make_shared<data::RangeSource>(samples, 0, K);

  for (int pass = 0; pass < result.passes; ++pass) {
    // This pass's nodes, their inputs as extra graph outputs of a copy of the model as it is now.
    std::vector<size_t> layers;
    for (size_t l = 0; l < nodes.size(); ++l)
      if (nodes[l].pass == pass) layers.push_back(l);
    onnx::ModelProto probe = model;
    std::vector<std::string> outputs;
    for (const auto& v : probe.graph().output()) outputs.push_back(v.name());
    std::vector<size_t> index;  // per layer of the pass: its X among the outputs
    for (size_t l : layers) {
      const std::string& x = result.layers[l].input;
      auto it = std::find(outputs.begin(), outputs.end(), x);
      if (it == outputs.end()) {
        probe.mutable_graph()->add_output()->set_name(x);
        outputs.push_back(x);
        it = outputs.end() - 1;
      }
      index.push_back(static_cast<size_t>(it - outputs.begin()));
    }
    nn::ModelOptions mo;
    mo.slabs = group.get();
    nn::Model net(S > 1 ? nn::split_depth(probe, origin, S).model : probe, origin, mo);
    if (net.input_names().size() != 1)
      throw_error(ErrorKind::unsupported, origin + " has " + std::to_string(net.input_names().size()) +
                                              " graph inputs; bn-polish feeds one (the images)");

    // Per layer: B batches x (count, mean[C], m2[C]), each batch filled by the rank that ran it.
    std::vector<size_t> offset;
    size_t total = 0;
    for (size_t l : layers) {
      offset.push_back(total);
      total += static_cast<size_t>(B) * (1 + 2 * static_cast<size_t>(result.layers[l].channels));
    }
    std::vector<double> gathered(total, 0.0);
    const auto loader = measure::first_batches(range, lo, slab, S);
    for (int64_t b = 0; b < B; ++b) {
      auto batch = loader->next_batch();
      if (!batch) throw_error(ErrorKind::bad_input, samples->origin() + ": the loader ended before batch " + std::to_string(b));
      if (b % replicas != replica) continue;
      const std::vector<Tensor> out = net.forward({batch->images}, nn::Mode::inference);
      if (slab != 0) continue;  // the group's ranks hold the same gathered inputs: its first rank counts them
      for (size_t j = 0; j < layers.size(); ++j) {
        const LayerStatistics& s = result.layers[layers[j]];
        const Tensor x = to_layout(out.at(index[j]), Layout::plain);
        if (x.rank() < 2 || x.dim(1) != s.channels)
          throw_error(ErrorKind::bad_input, "the input '" + s.input + "' of node '" + s.node + "' of " + origin +
                                                " does not have " + std::to_string(s.channels) + " channels on axis 1");
        const nn::ChannelMoments m = batch_moments(x);
        const size_t C = static_cast<size_t>(s.channels);
        double* dst = gathered.data() + offset[j] + static_cast<size_t>(b) * (1 + 2 * C);
        dst[0] = m.count;
        std::copy(m.mean.begin(), m.mean.end(), dst + 1);
        std::copy(m.m2.begin(), m.m2.end(), dst + 1 + C);
      }
    }
    comm.allreduce_sum(gathered.data(), gathered.size());

    for (size_t j = 0; j < layers.size(); ++j) {
      LayerStatistics& s = result.layers[layers[j]];
      const size_t C = static_cast<size_t>(s.channels);
      nn::ChannelMoments acc;
      for (int64_t b = 0; b < B; ++b) {
        const double* src = gathered.data() + offset[j] + static_cast<size_t>(b) * (1 + 2 * C);
        nn::ChannelMoments m;
        m.count = src[0];
        m.mean.assign(src + 1, src + 1 + C);
        m.m2.assign(src + 1 + C, src + 1 + 2 * C);
        acc.merge(m);
      }
      s.new_mean = acc.mean;
      s.new_var = acc.variance();
      for (size_t c = 0; c < C; ++c)
        if (!std::isfinite(s.new_mean[c]) || !std::isfinite(s.new_var[c]))
          throw_error(ErrorKind::bad_input, "node '" + s.node + "' of " + origin + ": the statistics of channel " +
                                                std::to_string(c) + " are not finite on " + samples->origin());
      const auto& n = model.graph().node(nodes[layers[j]].node);
      set_floats(*find_initializer(model, n.input(3)), s.new_mean);
      set_floats(*find_initializer(model, n.input(4)), s.new_var);
      // As written: float.
      for (auto* v : {&s.new_mean, &s.new_var})
        for (double& x : *v) x = static_cast<float>(x);
    }
  }
  return result;
}

}  // namespace hpcnn::bn
