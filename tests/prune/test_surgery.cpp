// prune-rate's analysis and surgery (prune/channel_graph.h, prune/surgery.h) on the committed
// models: with nothing pruned the model stays equal to the input as a protobuf message (value_info
// and IR-3 graph-input listings included); with a channel pruned the weights shrink, the
// listings follow, the stale value_info goes, and the result passes verify_pruned.
#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "onnx/graph.h"
#include "onnx/model.h"
#include "onnx/shapes.h"
#include "prune/channel_graph.h"
#include "prune/surgery.h"
#include "prune/verify.h"

using namespace hpcnn;
using google::protobuf::util::MessageDifferencer;

namespace {

onnx::ModelProto committed(const char* name) {
  return onnxu::load_model(std::filesystem::path(HPCNN_TEST_DATA_DIR) / "nn" / name / "model.onnx").proto;
}

// The model as an IR version 3 file would hold it: every initializer also a graph input, and a
// value_info entry for the first node's output.
onnx::ModelProto ir3_with_value_info(onnx::ModelProto m) {
  m.set_ir_version(3);
  auto* g = m.mutable_graph();
  for (const auto& t : g->initializer()) {
    auto* in = g->add_input();
    in->set_name(t.name());
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    for (int64_t d : t.dims()) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  auto* vi = g->add_value_info();
  vi->set_name(g->node(0).output(0));
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return m;
}

}  // namespace

TEST_CASE("analysis and surgery with nothing pruned leave the model equal to the input", "[prune][surgery]") {
  for (const char* name : {"fmnist_cnn", "resnet_tiny", "misc_ops"}) {
    for (bool ir3 : {false, true}) {
      INFO(name << (ir3 ? " (IR 3, value_info)" : ""));
      const onnx::ModelProto original = ir3 ? ir3_with_value_info(committed(name)) : committed(name);
      onnx::ModelProto m = original;
      const onnxu::ShapeMap shapes = onnxu::infer_shapes(m);
      const prune::ChannelGraph cg = prune::analyze_channels(m, onnxu::GraphView(m.graph()), shapes);
      REQUIRE_FALSE(cg.layers.empty());
      prune::apply_pruning(m, cg, std::vector<char>(static_cast<size_t>(cg.id_count()), 1));
      CHECK(MessageDifferencer::Equals(original, m));
    }
  }
}

TEST_CASE("surgery prunes a channel through the editable graph and keeps the model consistent", "[prune][surgery]") {
  const onnx::ModelProto original = ir3_with_value_info(committed("fmnist_cnn"));
  onnx::ModelProto m = original;
  const onnxu::ShapeMap shapes = onnxu::infer_shapes(m, /*declared_outputs=*/false);
  const prune::ChannelGraph cg = prune::analyze_channels(m, onnxu::GraphView(m.graph()), shapes);
  // The first prunable layer loses its channel 0 (with everything tied to it).
  const prune::Layer* layer = nullptr;
  for (const auto& L : cg.layers)
    if (!layer && cg.groups[L.group].fixed_reason.empty()) layer = &L;
  REQUIRE(layer);
  std::vector<char> kept(static_cast<size_t>(cg.id_count()), 1);
  kept[cg.root(layer->ids[0])] = 0;
  prune::apply_pruning(m, cg, kept);
  const onnxu::GraphView v(m.graph());
  const onnx::TensorProto* w = v.initializer(layer->weight.name);
  REQUIRE(w);
  CHECK(w->dims(layer->weight_axis) == layer->channels - 1);
  for (const auto& in : m.graph().input())
    if (in.name() == w->name()) CHECK(in.type().tensor_type().shape().dim(layer->weight_axis).dim_value() == layer->channels - 1);
  CHECK(m.graph().value_info_size() == 0);
  CHECK_NOTHROW(prune::verify_pruned(m, shapes));
  CHECK_FALSE(MessageDifferencer::Equals(original, m));
}
