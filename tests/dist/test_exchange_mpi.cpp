// Run under mpirun (any world size W >= 1; CI uses 2). Every rank builds the same model and the
// same global batch locally (nccl-tests style), so each can compute the expected result itself:
//  1. dense exchange: the allreduced average of the ranks' gradients over their slices equals
//     the single-process gradient over the whole batch (relative 1e-5);
//  2. sparse exchange (arXiv 2302.05045): for a model with 90% zero weights, the compacted
//     buffer equals the dense exchange at the non-zero positions, is <= 15% of its bytes, and
//     an optimizer step keeps every zero weight exactly zero.
// Exit status 0 on success; prints one line per check (rank 0).
#include <cmath>
#include <cstdio>
#include <random>

#include "dist/communicator.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/proto_tensor.h"
#include "train/batchnorm_sync.h"
#include "train/gradient_exchange.h"
#include "train/optimizer.h"

using namespace hpcnn;

namespace {

onnx::ModelProto small_cnn(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  auto tensor = [&](const std::string& name, Shape s) {
    Tensor t(s);
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = nd(rng);
    return nn::tensor_to_proto(t, name);
  };
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("cnn");
  *g->add_initializer() = tensor("w1", {8, 1, 3, 3});
  *g->add_initializer() = tensor("b1", {8});
  *g->add_initializer() = tensor("w2", {10, 8 * 4 * 4});
  *g->add_initializer() = tensor("b2", {10});
  auto node = [&](const std::string& op, std::vector<std::string> in, std::string out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (auto& s : in) n->add_input(s);
    n->add_output(out);
    return n;
  };
  auto* c = node("Conv", {"x", "w1", "b1"}, "c");
  auto* a = c->add_attribute();
  a->set_name("pads");
  a->set_type(onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) a->add_ints(1);
  node("Relu", {"c"}, "r");
  auto* p = node("MaxPool", {"r"}, "p");
  for (const char* name : {"kernel_shape", "strides"}) {
    auto* k = p->add_attribute();
    k->set_name(name);
    k->set_type(onnx::AttributeProto::INTS);
    k->add_ints(2);
    k->add_ints(2);
  }
  node("Flatten", {"p"}, "f");
  auto* gm = node("Gemm", {"f", "w2", "b2"}, "y");
  auto* tb = gm->add_attribute();
  tb->set_name("transB");
  tb->set_type(onnx::AttributeProto::INT);
  tb->set_i(1);
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return m;
}

void gradients(nn::Model& model, const Tensor& x, const std::vector<int32_t>& y) {
  model.zero_grad();
  auto out = model.forward({x}, nn::Mode::training);
  Tensor g;
  nn::softmax_cross_entropy(out[0], y, 0.1f, &g);
  model.backward({g});
}

Tensor slice(const Tensor& x, int64_t begin, int64_t n) {
  Shape s = x.shape();
  s[0] = n;
  Tensor t(s);
  const int64_t per = x.numel() / x.dim(0);
  std::copy(x.data() + begin * per, x.data() + (begin + n) * per, t.data());
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  auto comm = dist::make_communicator(&argc, &argv);
  const int rank = comm->rank(), world = comm->size();
  int failures = 0;
  auto report = [&](bool ok, const std::string& what) {
    int64_t bad = ok ? 0 : 1;
    comm->allreduce_max(&bad, 1);
    if (rank == 0) std::printf("%s: %s\n", bad ? "FAIL" : "ok", what.c_str());
    failures += static_cast<int>(bad);
  };
  try {
    // 0. the ranks on this node, from MPI_Comm_split_type (the test runs both ranks on one node)
    const auto locals = comm->allgather(static_cast<uint64_t>(comm->local_rank() * 1000 + comm->local_size()));
    bool node_ok = true;
    for (int r = 0; r < world; ++r) node_ok = node_ok && locals[r] == static_cast<uint64_t>(r * 1000 + world);
    report(node_ok && !comm->host().empty(),
           "local rank and size per node (" + std::to_string(world) + " ranks on " + comm->host() + ")");

    const int64_t B = 6;
    std::mt19937 rng(42);
    std::normal_distribution<float> nd;
    Tensor x({B * world, 1, 8, 8});
    for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = nd(rng);
    std::vector<int32_t> y(static_cast<size_t>(B * world));
    for (auto& v : y) v = static_cast<int32_t>(rng() % 10);

    // 1. dense exchange == single-process gradient over the union of the batches
    nn::Model local(small_cnn(7), "cnn");
    std::vector<int32_t> my_y(y.begin() + rank * B, y.begin() + (rank + 1) * B);
    gradients(local, slice(x, rank * B, B), my_y);
    train::GradientExchange dense(*comm, train::parameter_layout(local.parameters(), false));
    dense.exchange(local.parameters(), 1);
    nn::Model whole(small_cnn(7), "cnn");
    gradients(whole, x, y);
    double max_diff = 0, max_ref = 0;
    for (size_t k = 0; k < whole.parameters().size(); ++k) {
      const auto& ref = whole.parameters()[k].grad;
      const float* got = dense.fused().data() + dense.layout().offset[k];
      for (int64_t i = 0; i < ref.numel(); ++i) {
        max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - ref.data()[i]));
        max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref.data()[i])));
      }
    }
    char msg[160];
    std::snprintf(msg, sizeof msg, "averaged gradient of %d ranks == single-process gradient (max |diff| %.3g, max |grad| %.3g)",
                  world, max_diff, max_ref);
    report(max_diff <= 1e-5 * max_ref, msg);

    // 2. sparse exchange on a model with 90% zero weights
    nn::Model sparse_model(small_cnn(7), "cnn");
    std::mt19937 mrng(3);  // same mask on every rank
    for (auto& p : sparse_model.parameters())
      if (p.value.rank() >= 2)
        for (int64_t i = 0; i < p.value.numel(); ++i)
          if (mrng() % 10 != 0) p.value.data()[i] = 0.0f;
    gradients(sparse_model, slice(x, rank * B, B), my_y);
    dist::FusedLayout sl = train::parameter_layout(sparse_model.parameters(), true);
    train::GradientExchange sx(*comm, sl);
    sx.exchange(sparse_model.parameters(), 1);
    train::GradientExchange dx(*comm, train::parameter_layout(sparse_model.parameters(), false));
    dx.exchange(sparse_model.parameters(), 1);
    bool equal = true;
    for (size_t k = 0; k < sparse_model.parameters().size(); ++k) {
      const float* d = dx.fused().data() + dx.layout().offset[k];
      const float* s = sx.fused().data() + sl.offset[k];
      if (sl.dense[k]) {
        for (int64_t i = 0; i < sparse_model.parameters()[k].value.numel(); ++i) equal = equal && d[i] == s[i];
      } else {
        for (size_t j = 0; j < sl.positions[k].size(); ++j) equal = equal && d[sl.positions[k][j]] == s[j];
      }
    }
    report(equal, "sparse exchange == dense exchange on the non-zero positions");
    const double ratio = static_cast<double>(sx.bytes_per_step()) / static_cast<double>(dx.bytes_per_step());
    report(ratio <= 0.15, "sparse bytes per step " + std::to_string(sx.bytes_per_step()) + " vs dense " +
                              std::to_string(dx.bytes_per_step()) + " (" + std::to_string(100 * ratio) + "%)");
    train::OptimizerOptions oo;
    oo.weight_decay = 1e-2f;
    train::Optimizer opt(oo, sx.layout(), sx.positions());
    for (int s = 0; s < 3; ++s) opt.step(sparse_model.parameters(), sx.fused(), 0.1f);
    bool zeros = true, moved = false;
    for (size_t k = 0; k < sparse_model.parameters().size(); ++k) {
      const auto& p = sparse_model.parameters()[k];
      if (sl.dense[k]) continue;
      std::vector<bool> nz(static_cast<size_t>(p.value.numel()), false);
      for (int64_t i : sl.positions[k]) nz[static_cast<size_t>(i)] = true;
      for (int64_t i = 0; i < p.value.numel(); ++i) {
        if (!nz[static_cast<size_t>(i)])
          zeros = zeros && p.value.data()[i] == 0.0f;
        else
          moved = moved || p.value.data()[i] != 0.0f;
      }
    }
    report(zeros && moved, "zero weights stay exactly zero after optimizer steps (non-zeros train)");

    // 3. the exact cross-rank reduction of BatchNormalization moments: every rank computes the
    //    moments of all ranks' values locally (they are drawn from one seed) and compares.
    auto values_of = [](int r) {
      std::mt19937_64 vr(100 + static_cast<uint64_t>(r));
      std::normal_distribution<double> vd(50.0, 0.5);  // a large mean: the shift keeps the digits
      std::vector<std::vector<double>> v(2, std::vector<double>(static_cast<size_t>(7 + 5 * r)));
      for (auto& ch : v)
        for (double& e : ch) e = vd(vr);
      return v;
    };
    auto moments_of = [](const std::vector<std::vector<double>>& v) {
      nn::ChannelMoments m;
      m.count = static_cast<double>(v[0].size());
      for (const auto& ch : v) {
        double mean = 0, m2 = 0;
        for (double e : ch) mean += e;
        mean /= m.count;
        for (double e : ch) m2 += (e - mean) * (e - mean);
        m.mean.push_back(mean);
        m.m2.push_back(m2);
      }
      return m;
    };
    nn::ChannelMoments mine = moments_of(values_of(rank));
    const std::vector<double> shift{50.0, 49.5};
    std::vector<nn::ChannelMoments*> all{&mine};
    std::vector<const std::vector<double>*> shifts{&shift};
    train::allreduce_moments(*comm, all, shifts);
    std::vector<std::vector<double>> everything(2);
    for (int r = 0; r < world; ++r) {
      const auto v = values_of(r);
      for (int c = 0; c < 2; ++c) everything[c].insert(everything[c].end(), v[c].begin(), v[c].end());
    }
    const nn::ChannelMoments want = moments_of(everything);
    bool same = mine.count == want.count;
    for (int c = 0; c < 2; ++c)
      same = same && std::fabs(mine.mean[c] - want.mean[c]) <= 1e-12 * std::fabs(want.mean[c]) &&
             std::fabs(mine.m2[c] - want.m2[c]) <= 1e-9 * want.m2[c];
    report(same, "BatchNorm moments reduced over " + std::to_string(world) + " ranks == the moments of all their values");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
    comm->abort(1);
  }
  return failures ? 1 : 0;
}
