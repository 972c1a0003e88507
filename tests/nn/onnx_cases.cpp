// onnx_cases: runs ONNX backend-style test cases (CASE/model.onnx + CASE/test_data_set_N/
// {input,output}_K.pb) through the training engine (nn::Model) and compares every output with
// the expected one: |got - exp| <= 1e-5 + 1e-4 * |exp| elementwise, same shape, NaN == NaN.
//
//   onnx_cases [--gradcheck] [--ops Conv,Relu,...] [--samples N] [--threads N] [-v]
//              [--expect FILE | --write-expect FILE] DIR...
//
// DIR is a case folder or a folder of case folders (tests/fixtures/export_onnx_node_tests.py and
// tests/fixtures/make_model_cases.py write them). A case counts as
//   passed       every output of every data set within tolerance;
//   unsupported  the engine threw hpcnn::Error of kind ErrorKind::unsupported (at load, while
//                converting an input with tensor_from_proto (non-fp32 dtypes), or in forward);
//                the reason is shown with that stage: [load], [reading inputs], [forward];
//   failed       an output differs (name, shape or values: max abs error and the worst element
//                are shown) or anything else was thrown.
// Cases run in Mode::inference, except those with a BatchNormalization node with
// training_mode = 1 (opset 14+), which run in Mode::training (their running-mean/var outputs are
// the updated statistics).
//
// --gradcheck: for every passed case, the gradients of the graph inputs (ModelOptions
// input_grads) and of the parameters are checked against central finite differences of
//   L = sum_i sum(out_i * R_i)
// with fixed N(0, 1) tensors R_i (zero for the non-differentiable outputs: BatchNormalization
// running statistics, Dropout masks, MaxPool indices), forward in Mode::training, L accumulated
// in double, buffers (BatchNormalization running statistics) restored before every forward.
// Up to --samples (64) elements of each tensor, at steps h = 1e-3 * clamp(|x|, 1, 10), taken as
// the rounded fp32 values x +- h actually differ. Elements near a kink (ReLU at 0, a MaxPool
// tie, a Clip bound) are detected because the one-sided differences (L(x+h) - L(x)) / h and
// (L(x) - L(x-h)) / h disagree beyond the tolerance; they are skipped and counted. Tolerance:
//   |fd - an| <= 1e-2 * |an| + 1e-3 * scale + noise
// where scale = the largest |an| or |fd| of the tensor and noise = 2^-20 * ||out * R||_2 / h,
// the norm over the output elements that the perturbation changed, bounds the finite difference
// of the fp32 rounding of the outputs (a few ulps, independent per element) that it re-rolls. A wrong gradient (missing factor,
// transposed operand, lost broadcast reduction, wrong window) errs by the order of the gradient itself. Cases with an active
// Dropout (ratio != 0) are skipped: the mask changes with every forward.
//
// Prints a per-operator table (operator = the case's one operator type besides Constant;
// "(model) GRAPH-NAME" for graphs of several) and one line per unsupported/failed case. Exit status 1 when
// a case or gradient check failed, 2 on usage errors or when no case was found.
//
// --expect FILE: the committed outcome of every case (tests/data/conformance/*.json): forward
// "pass" or "unsupported" with its reason, and with --gradcheck "pass" or "skipped" with its
// reason. Any difference fails the run (exit 1), in either direction: a supported case that
// regresses to unsupported, an unsupported one that now passes (update the file), a changed
// reason, a case that appeared, or (when whole suite folders are given and no --ops filter) an
// expected case that is gone. Reasons are compared with the case folder written as "CASE".
// --write-expect FILE: records the outcomes of this run into FILE (cases not run keep their
// entries; gradcheck outcomes are written only with --gradcheck); refused when a case failed.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/model.h"
#include "nn/proto_tensor.h"
#include "nn/threads.h"
#include "onnx/model.h"
#include "onnx/tensor.h"

namespace fs = std::filesystem;
using hpcnn::Error;
using hpcnn::ErrorKind;
using hpcnn::Layout;
using hpcnn::Tensor;
using hpcnn::nn::Mode;
using hpcnn::nn::Model;
using hpcnn::nn::ModelOptions;

namespace {

constexpr double kRtol = 1e-4, kAtol = 1e-5;

struct Options {
  bool gradcheck = false;
  std::set<std::string> ops;
  int samples = 64;
  int threads = 0;
  bool verbose = false;
  std::string expect, write_expect;
  std::vector<std::string> dirs;
};

enum class Status { passed, failed, unsupported };
enum class GradStatus { none, passed, failed, skipped };

struct Result {
  std::string name, op, dir;
  Status status = Status::passed;
  std::string reason;
  GradStatus grad = GradStatus::none;
  std::string grad_reason;
  double seconds = 0;
  double worst_ratio = 0;  // largest |got - exp| / tolerance of a passed case
};

// A throwable that marks a case as failed (not an engine exception).
struct Mismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string one_line(std::string s) {
  for (size_t p; (p = s.find("\n  ")) != std::string::npos;) s.replace(p, 3, " | ");
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

std::string shape_str(const std::vector<int64_t>& s) { return hpcnn::shape_to_string(s); }

// The operator a case is filed under.
std::string primary_op(const onnx::ModelProto& m) {
  std::set<std::string> ops;
  for (const auto& n : m.graph().node()) ops.insert(n.op_type());
  if (ops.size() > 1) ops.erase("Constant");
  if (ops.size() == 1) return *ops.begin();
  return "(model) " + m.graph().name();
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool bn_training_mode(const onnx::ModelProto& m) {
  for (const auto& n : m.graph().node())
    if (n.op_type() == "BatchNormalization")
      if (const auto* a = find_attr(n, "training_mode"); a && a->i() != 0) return true;
  return false;
}

// Outputs that no loss differentiates: BatchNormalization running statistics and saved
// mean/var, Dropout masks, MaxPool indices.
std::set<std::string> non_differentiable_outputs(const onnx::ModelProto& m) {
  std::set<std::string> out;
  for (const auto& n : m.graph().node())
    if (n.op_type() == "BatchNormalization" || n.op_type() == "Dropout" || n.op_type() == "MaxPool")
      for (int i = 1; i < n.output_size(); ++i) out.insert(n.output(i));
  return out;
}

// The Dropout ratio of a node, from its attribute (opset < 12) or its constant/input ratio
// (default 0.5); -1 when it cannot be determined.
double dropout_ratio(const onnx::ModelProto& m, const onnx::NodeProto& n, int64_t opset,
                     const std::map<std::string, Tensor>& fed) {
  if (opset < 12) {
    const auto* a = find_attr(n, "ratio");
    return a ? a->f() : 0.5;
  }
  if (n.input_size() < 2 || n.input(1).empty()) return 0.5;
  for (const auto& t : m.graph().initializer())
    if (t.name() == n.input(1)) return hpcnn::onnxu::to_doubles(t).at(0);
  for (const auto& node : m.graph().node())
    if (node.op_type() == "Constant" && node.output(0) == n.input(1))
      if (const auto* a = find_attr(node, "value")) return hpcnn::onnxu::to_doubles(a->t()).at(0);
  if (auto it = fed.find(n.input(1)); it != fed.end() && it->second.numel() == 1) return it->second.data()[0];
  return -1;
}

std::vector<fs::path> data_sets(const fs::path& dir) {
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  return sets;
}

std::vector<fs::path> numbered(const fs::path& set, const std::string& prefix) {
  std::vector<fs::path> files;
  for (int i = 0;; ++i) {
    fs::path p = set / (prefix + "_" + std::to_string(i) + ".pb");
    if (!fs::exists(p)) break;
    files.push_back(p);
  }
  return files;
}

// Compares one output; throws Mismatch with the details. Returns the largest error / tolerance.
double compare(const std::string& what, const Tensor& got, const onnx::TensorProto& exp) {
  const std::vector<int64_t> edims = hpcnn::onnxu::dims_of(exp);
  if (!got.defined()) throw Mismatch(what + ": the engine returned no tensor, expected " + shape_str(edims));
  if (got.layout() != Layout::plain) throw Mismatch(what + ": returned in nhwc layout (outputs must be plain)");
  if (got.shape() != edims) throw Mismatch(what + ": shape " + shape_str(got.shape()) + ", expected " + shape_str(edims));
  const std::vector<double> e = hpcnn::onnxu::to_doubles(exp);
  double max_err = 0, max_ratio = 0;
  int64_t worst = -1, bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.data()[i], x = e[static_cast<size_t>(i)];
    if (std::isnan(g) && std::isnan(x)) continue;
    const double err = std::isinf(x) && g == x ? 0.0 : std::abs(g - x);
    const bool ok = err <= kAtol + kRtol * std::abs(x);
    if (ok) max_ratio = std::max(max_ratio, err / (kAtol + kRtol * std::abs(x)));
    if (!ok) ++bad;
    if (!ok && (worst < 0 || !(err <= max_err))) worst = i;
    if (!(err <= max_err)) max_err = err;
  }
  if (bad) {
    const auto i = static_cast<size_t>(worst);
    throw Mismatch(what + ": " + std::to_string(bad) + " of " + std::to_string(got.numel()) + " elements differ, max abs error " +
                   fmt(max_err) + " (element " + std::to_string(worst) + ": got " + fmt(got.data()[worst]) + ", expected " +
                   fmt(e[i]) + ")");
  }
  return max_ratio;
}

double loss_of(const std::vector<Tensor>& outs, const std::vector<Tensor>& r) {
  double l = 0;
  for (size_t i = 0; i < outs.size() && i < r.size(); ++i) {
    if (!r[i].defined()) continue;
    if (outs[i].numel() != r[i].numel()) throw Mismatch("output " + std::to_string(i) + " changed size between forwards");
    Tensor o = hpcnn::to_layout(outs[i], Layout::plain);
    for (int64_t j = 0; j < o.numel(); ++j) l += static_cast<double>(o.data()[j]) * r[i].data()[j];
  }
  return l;
}

std::vector<Tensor> copies(const std::vector<Tensor>& ts) {
  std::vector<Tensor> c;
  for (const Tensor& t : ts) c.push_back(t.defined() ? t.clone() : t);
  return c;
}

// ||out * R||_2 over the output elements that differ between the unperturbed outputs and either
// perturbed run: only their fp32 rounding is re-rolled by a perturbation (an element-wise or
// windowed operator changes a few outputs; a batch-statistics one changes them all).
double changed_norm(const std::vector<Tensor>& base, const std::vector<Tensor>& plus, const std::vector<Tensor>& minus,
                    const std::vector<Tensor>& r) {
  double sum = 0;
  for (size_t i = 0; i < base.size() && i < r.size(); ++i) {
    if (!r[i].defined()) continue;
    const Tensor b = hpcnn::to_layout(base[i], Layout::plain), p = hpcnn::to_layout(plus[i], Layout::plain),
                 m = hpcnn::to_layout(minus[i], Layout::plain);
    if (p.numel() != b.numel() || m.numel() != b.numel()) throw Mismatch("output " + std::to_string(i) + " changed size");
    for (int64_t j = 0; j < b.numel(); ++j)
      if (p.data()[j] != b.data()[j] || m.data()[j] != b.data()[j])
        sum += std::pow(static_cast<double>(b.data()[j]) * r[i].data()[j], 2);
  }
  return std::sqrt(sum);
}

// Gradient check of one passed case. Returns (status, reason).
std::pair<GradStatus, std::string> gradcheck(const onnx::ModelProto& proto, const std::string& origin,
                                             const std::vector<Tensor>& fed_inputs, const std::string& case_name,
                                             const Options& opt) {
  const int64_t opset = hpcnn::onnxu::default_opset(proto);
  Model model(proto, origin, ModelOptions{.input_grads = true, .seed = 1});
  std::map<std::string, Tensor> fed;
  for (size_t i = 0; i < model.input_names().size() && i < fed_inputs.size(); ++i) fed[model.input_names()[i]] = fed_inputs[i];
  for (const auto& n : proto.graph().node())
    if (n.op_type() == "Dropout") {
      const double ratio = dropout_ratio(proto, n, opset, fed);
      if (ratio != 0) return {GradStatus::skipped, "Dropout active in training mode (ratio " + fmt(ratio) + ")"};
    }

  std::vector<Tensor> inputs;
  for (const auto& t : fed_inputs) inputs.push_back(t.clone());
  auto& buffers = model.buffers();
  std::vector<Tensor> saved;
  for (auto& b : buffers) saved.push_back(b.value.clone());
  auto forward = [&]() {
    for (size_t i = 0; i < buffers.size(); ++i) {
      if (buffers[i].value.numel() != saved[i].numel()) throw Mismatch("buffer '" + buffers[i].name + "' changed size");
      std::memcpy(buffers[i].value.data(), saved[i].data(), saved[i].bytes());
    }
    return model.forward(inputs, Mode::training);
  };

  std::vector<Tensor> outs = forward();
  const std::set<std::string> nondiff = non_differentiable_outputs(proto);
  std::mt19937_64 rng(std::hash<std::string>{}(case_name));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Tensor> r;
  bool any_r = false;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (nondiff.count(model.output_names()[i]) || outs[i].numel() == 0) {
      r.emplace_back();
      continue;
    }
    Tensor t(outs[i].shape());
    for (int64_t j = 0; j < t.numel(); ++j) t.data()[j] = normal(rng);
    r.push_back(t);
    any_r = true;
  }
  if (!any_r) return {GradStatus::skipped, "no differentiable output"};
  outs = copies(outs);
  const double l0 = loss_of(outs, r);

  model.zero_grad();
  model.backward(r);
  struct Target {
    std::string what;
    float* values;
    int64_t n;
    Tensor grad;  // undefined: the engine gave none
  };
  std::vector<Target> targets;
  const auto& ig = model.input_grads();
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor g = i < ig.size() && ig[i].defined() ? hpcnn::to_layout(ig[i], Layout::plain).clone() : Tensor();
    targets.push_back({"input '" + model.input_names()[i] + "'", inputs[i].data(), inputs[i].numel(), g});
  }
  for (auto& p : model.parameters()) {
    Tensor g = p.grad.defined() ? hpcnn::to_layout(p.grad, Layout::plain).clone() : Tensor();
    targets.push_back({"parameter '" + p.name + "'", p.value.data(), p.value.numel(), g});
  }

  int checked = 0, kinks = 0;
  std::vector<std::string> failures;
  for (auto& t : targets) {
    if (t.n == 0) continue;
    if (t.grad.defined() && t.grad.numel() != t.n) {
      failures.push_back(t.what + ": gradient has " + std::to_string(t.grad.numel()) + " elements, the tensor " +
                         std::to_string(t.n));
      continue;
    }
    std::vector<int64_t> idx(static_cast<size_t>(t.n));
    for (int64_t i = 0; i < t.n; ++i) idx[static_cast<size_t>(i)] = i;
    if (t.n > opt.samples) {
      for (int i = 0; i < opt.samples; ++i) {
        std::uniform_int_distribution<int64_t> pick(i, t.n - 1);
        std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(pick(rng))]);
      }
      idx.resize(static_cast<size_t>(opt.samples));
      std::sort(idx.begin(), idx.end());
    }
    struct Sample {
      int64_t i;
      double an, fd, fdp, fdm, h;
      double out_r_norm;  // ||out * R||_2 over the outputs this perturbation changed
    };
    std::vector<Sample> s;
    double scale = 0;
    if (t.grad.defined())
      for (int64_t i = 0; i < t.n; ++i) scale = std::max(scale, std::abs(static_cast<double>(t.grad.data()[i])));
    for (int64_t i : idx) {
      const float x0 = t.values[i];
      const float h = 1e-3f * std::clamp(std::abs(x0), 1.0f, 10.0f);
      const float xp = x0 + h, xm = x0 - h;
      t.values[i] = xp;
      const std::vector<Tensor> op = copies(forward());  // outputs may be views of the inputs (Flatten)
      t.values[i] = xm;
      const std::vector<Tensor> om = copies(forward());
      t.values[i] = x0;
      const double lp = loss_of(op, r), lm = loss_of(om, r);
      Sample sm{i,
                t.grad.defined() ? t.grad.data()[i] : 0.0,
                (lp - lm) / (double(xp) - double(xm)),
                (lp - l0) / (double(xp) - double(x0)),
                (l0 - lm) / (double(x0) - double(xm)),
                (double(xp) - double(xm)) / 2,
                changed_norm(outs, op, om, r)};
      if (!std::isfinite(sm.fd)) {
        failures.push_back(t.what + "[" + std::to_string(i) + "]: non-finite loss near the point");
        continue;
      }
      scale = std::max(scale, std::abs(sm.fd));
      s.push_back(sm);
    }
    forward();  // leave the model at the unperturbed point
    double worst = 0;
    std::string worst_msg;
    int bad = 0;
    for (const auto& sm : s) {
      const double noise = std::ldexp(sm.out_r_norm, -20) / sm.h;
      const double tol = 1e-2 * std::abs(sm.an) + 1e-3 * scale + noise;
      if (std::abs(sm.fdp - sm.fdm) > tol) {
        ++kinks;
        continue;
      }
      ++checked;
      const double err = std::abs(sm.fd - sm.an);
      if (err > tol) ++bad;
      if (err / tol > worst) {
        worst = err / tol;
        worst_msg = t.what + "[" + std::to_string(sm.i) + "]: analytic " + fmt(sm.an) + ", finite difference " + fmt(sm.fd) +
                    " (tolerance " + fmt(tol) + ")";
      }
    }
    if (bad) {
      std::string m = std::to_string(bad) + " of " + std::to_string(s.size()) + " sampled elements of " + t.what + " differ" +
                      (t.grad.defined() ? "" : " (the engine returned no gradient)") + "; worst " + worst_msg;
      failures.push_back(m);
    } else if (opt.verbose && !worst_msg.empty()) {
      std::cerr << "  " << case_name << " " << t.what << ": worst err/tol " << fmt(worst) << "\n";
    }
  }
  if (!failures.empty()) {
    std::string m = failures[0];
    for (size_t i = 1; i < failures.size(); ++i) m += "; " + failures[i];
    return {GradStatus::failed, m};
  }
  if (checked == 0) return {GradStatus::skipped, kinks ? "every sampled element is at a kink" : "nothing to check"};
  return {GradStatus::passed,
          std::to_string(checked) + " elements" + (kinks ? ", " + std::to_string(kinks) + " at kinks skipped" : std::string())};
}

Result run_case(const fs::path& dir, const Options& opt) {
  Result res;
  res.name = dir.filename().string();
  res.dir = dir.string();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> first_inputs;
  onnx::ModelProto proto;
  const std::string origin = (dir / "model.onnx").string();
  const char* stage = "load";  // where an exception came from
  try {
    hpcnn::onnxu::Model loaded = hpcnn::onnxu::load_model(dir / "model.onnx");
    proto = std::move(loaded.proto);
    res.op = primary_op(proto);
    if (!opt.ops.empty() && !opt.ops.count(res.op)) {
      res.op.clear();  // filtered out
      return res;
    }
    const Mode mode = bn_training_mode(proto) ? Mode::training : Mode::inference;
    Model model(proto, origin);
    stage = "reading inputs";
    const auto sets = data_sets(dir);
    if (sets.empty()) throw Mismatch("no test_data_set_* folder");
    for (const auto& set : sets) {
      const auto in_files = numbered(set, "input"), out_files = numbered(set, "output");
      if (in_files.size() != model.input_names().size())
        throw Mismatch(set.filename().string() + " has " + std::to_string(in_files.size()) + " inputs, the model " +
                       std::to_string(model.input_names().size()));
      std::vector<Tensor> inputs;
      for (const auto& f : in_files) inputs.push_back(hpcnn::nn::tensor_from_proto(hpcnn::nn::read_tensor_proto(f.string())));
      if (first_inputs.empty()) first_inputs = inputs;
      stage = "forward";
      std::vector<Tensor> outs = model.forward(inputs, mode);
      stage = "reading inputs";
      if (outs.size() != out_files.size())
        throw Mismatch("the engine returned " + std::to_string(outs.size()) + " outputs, expected " +
                       std::to_string(out_files.size()));
      for (size_t i = 0; i < outs.size(); ++i)
        res.worst_ratio = std::max(res.worst_ratio, compare(set.filename().string() + " output " + std::to_string(i) + " '" +
                                                                model.output_names()[i] + "'",
                                                            outs[i], hpcnn::nn::read_tensor_proto(out_files[i].string())));
    }
  } catch (const Error& e) {
    res.status = e.kind() == ErrorKind::unsupported ? Status::unsupported : Status::failed;
    res.reason = std::string("[") + stage + "] " +
                 (e.kind() == ErrorKind::unsupported ? "" : "hpcnn::Error (exit code " + std::to_string(e.exit_code()) + "): ") +
                 one_line(e.what());
  } catch (const Mismatch& e) {
    res.status = Status::failed;
    res.reason = e.what();
  } catch (const std::exception& e) {
    res.status = Status::failed;
    res.reason = std::string("[") + stage + "] exception: " + one_line(e.what());
  }
  if (res.status == Status::passed && opt.gradcheck) {
    try {
      std::tie(res.grad, res.grad_reason) = gradcheck(proto, origin, first_inputs, res.name, opt);
    } catch (const Error& e) {
      res.grad = e.kind() == ErrorKind::unsupported ? GradStatus::skipped : GradStatus::failed;
      res.grad_reason = (e.kind() == ErrorKind::unsupported ? "unsupported: " : "hpcnn::Error: ") + one_line(e.what());
    } catch (const std::exception& e) {
      res.grad = GradStatus::failed;
      res.grad_reason = std::string("exception: ") + one_line(e.what());
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::vector<fs::path> collect(const std::vector<std::string>& dirs) {
  std::vector<fs::path> cases;
  for (const auto& d : dirs) {
    fs::path p(d);
    if (fs::exists(p / "model.onnx")) {
      cases.push_back(p);
      continue;
    }
    if (!fs::is_directory(p)) throw Mismatch(d + " is not a folder");
    std::vector<fs::path> sub;
    for (const auto& e : fs::directory_iterator(p))
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) sub.push_back(e.path());
    std::sort(sub.begin(), sub.end());
    if (sub.empty()) throw Mismatch(d + " holds no case folder (CASE/model.onnx)");
    cases.insert(cases.end(), sub.begin(), sub.end());
  }
  return cases;
}

void describe_suite(const std::vector<std::string>& dirs) {
  for (const auto& d : dirs) {
    std::ifstream in(fs::path(d) / "MANIFEST.json");
    if (!in) continue;
    try {
      auto j = nlohmann::json::parse(in);
      std::cout << d << ": ONNX backend test cases of onnx " << j.value("onnx_version", "?") << " (" << j.value("source", "?")
                << "), " << j["cases"].size() << " cases\n";
    } catch (const std::exception&) {
    }
  }
}

// ---- committed expectations -------------------------------------------------------------------
std::string portable(std::string reason, const std::string& dir) {
  for (size_t p; !dir.empty() && (p = reason.find(dir)) != std::string::npos;) reason.replace(p, dir.size(), "CASE");
  return reason;
}

nlohmann::ordered_json outcome(const Result& r, bool gradcheck) {
  nlohmann::ordered_json o;
  o["forward"] = r.status == Status::passed ? "pass" : r.status == Status::unsupported ? "unsupported" : "FAILED";
  if (r.status != Status::passed) o["reason"] = portable(r.reason, r.dir);
  if (gradcheck && r.grad != GradStatus::none) {
    o["gradcheck"] = r.grad == GradStatus::passed ? "pass" : r.grad == GradStatus::skipped ? "skipped" : "FAILED";
    if (r.grad == GradStatus::skipped) o["gradcheck_reason"] = portable(r.grad_reason, r.dir);
  }
  return o;
}

nlohmann::ordered_json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Mismatch("cannot read " + path);
  return nlohmann::ordered_json::parse(in);
}

// Differences between this run and the committed expectations (empty: all as expected).
std::vector<std::string> compare_expectations(const std::vector<Result>& results, const Options& opt, bool whole_suites) {
  const auto want = read_json_file(opt.expect).at("cases");
  std::vector<std::string> diffs;
  std::set<std::string> seen;
  for (const auto& r : results) {
    seen.insert(r.name);
    const auto got = outcome(r, opt.gradcheck);
    if (!want.contains(r.name)) {
      diffs.push_back(r.name + ": not in " + opt.expect + " (got " + got.dump() + ")");
      continue;
    }
    const auto& w = want.at(r.name);
    for (const char* key : {"forward", "reason"})
      if (w.value(key, std::string()) != got.value(key, std::string()))
        diffs.push_back(r.name + ": " + key + " expected '" + w.value(key, std::string()) + "', got '" +
                        got.value(key, std::string()) + "'");
    if (opt.gradcheck)
      for (const char* key : {"gradcheck", "gradcheck_reason"})
        if (w.value(key, std::string()) != got.value(key, std::string()))
          diffs.push_back(r.name + ": " + key + " expected '" + w.value(key, std::string()) + "', got '" +
                          got.value(key, std::string()) + "'");
  }
  if (whole_suites && opt.ops.empty())
    for (const auto& [name, w] : want.items())
      if (!seen.count(name)) diffs.push_back(name + ": expected (" + w.dump() + ") but no such case was found");
  return diffs;
}

void write_expectations(const std::vector<Result>& results, const Options& opt) {
  nlohmann::ordered_json all = {{"about", "expected outcome of every conformance case: tests/nn/onnx_cases.cpp --expect"},
                                {"cases", nlohmann::ordered_json::object()}};
  if (fs::exists(opt.write_expect)) all = read_json_file(opt.write_expect);
  std::map<std::string, nlohmann::ordered_json> cases;
  for (const auto& [name, o] : all["cases"].items()) cases[name] = o;
  for (const auto& r : results) {
    auto o = outcome(r, opt.gradcheck);
    if (!opt.gradcheck && cases.count(r.name))
      for (const char* key : {"gradcheck", "gradcheck_reason"})
        if (cases[r.name].contains(key)) o[key] = cases[r.name][key];
    cases[r.name] = o;
  }
  all["cases"] = nlohmann::ordered_json::object();
  for (const auto& [name, o] : cases) all["cases"][name] = o;
  std::ofstream(opt.write_expect) << all.dump(1) << "\n";
}

int usage(const char* msg) {
  if (msg) std::cerr << "onnx_cases: " << msg << "\n";
  std::cerr << "usage: onnx_cases [--gradcheck] [--ops Conv,Relu,...] [--samples N] [--threads N] [-v]\n"
               "                  [--expect FILE | --write-expect FILE] DIR...\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Mismatch(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--gradcheck") {
        opt.gradcheck = true;
      } else if (a == "--ops") {
        std::stringstream ss(value());
        for (std::string op; std::getline(ss, op, ',');)
          if (!op.empty()) opt.ops.insert(op);
      } else if (a == "--samples") {
        opt.samples = std::stoi(value());
        if (opt.samples < 1) return usage("--samples must be at least 1");
      } else if (a == "--threads") {
        opt.threads = std::stoi(value());
      } else if (a == "--expect") {
        opt.expect = value();
      } else if (a == "--write-expect") {
        opt.write_expect = value();
      } else if (a == "-v" || a == "--verbose") {
        opt.verbose = true;
      } else if (a == "-h" || a == "--help") {
        usage(nullptr);
        return 0;
      } else if (!a.empty() && a[0] == '-') {
        return usage(("unknown flag " + a).c_str());
      } else {
        opt.dirs.push_back(a);
      }
    } catch (const std::exception& e) {
      return usage(e.what());
    }
  }
  if (opt.dirs.empty()) return usage("no case folder given");
  std::vector<fs::path> cases;
  try {
    cases = collect(opt.dirs);
  } catch (const std::exception& e) {
    return usage(e.what());
  }
  hpcnn::nn::set_num_threads(opt.threads);
  describe_suite(opt.dirs);

  std::vector<Result> results;
  for (const auto& c : cases) {
    Result r = run_case(c, opt);
    if (r.op.empty()) continue;
    if (opt.verbose) {
      std::cerr << (r.status == Status::passed   ? "pass "
                    : r.status == Status::failed ? "FAIL "
                                                 : "unsup ")
                << r.name << " (" << fmt(r.seconds) << " s";
      if (r.status == Status::passed) std::cerr << ", max error/tolerance " << fmt(r.worst_ratio);
      std::cerr << ")";
      if (r.grad != GradStatus::none)
        std::cerr << " grad "
                  << (r.grad == GradStatus::passed   ? "pass"
                      : r.grad == GradStatus::failed ? "FAIL"
                                                     : "skip")
                  << ": " << r.grad_reason;
      std::cerr << "\n";
    }
    results.push_back(std::move(r));
  }
  if (results.empty()) return usage("no case matched --ops");

  struct Row {
    int passed = 0, failed = 0, unsupported = 0, gpass = 0, gfail = 0, gskip = 0;
  };
  std::map<std::string, Row> rows;
  Row total;
  for (const auto& r : results) {
    for (Row* row : {&rows[r.op], &total}) {
      (r.status == Status::passed ? row->passed : r.status == Status::failed ? row->failed : row->unsupported)++;
      if (r.grad == GradStatus::passed) row->gpass++;
      if (r.grad == GradStatus::failed) row->gfail++;
      if (r.grad == GradStatus::skipped) row->gskip++;
    }
  }
  auto cell = [](int v, int w) {
    std::string s = std::to_string(v);
    return std::string(static_cast<size_t>(std::max(0, w - static_cast<int>(s.size()))), ' ') + s;
  };
  size_t width = 18;
  for (const auto& [op, row] : rows) width = std::max(width, op.size() + 2);
  std::cout << "\noperator" << std::string(width - 8, ' ') << "passed  failed  unsupported";
  if (opt.gradcheck) std::cout << "  | gradcheck passed  failed  skipped";
  std::cout << "\n";
  auto print_row = [&](const std::string& name, const Row& row) {
    std::cout << name << std::string(width - name.size(), ' ') << cell(row.passed, 6) << cell(row.failed, 8)
              << cell(row.unsupported, 13);
    if (opt.gradcheck) std::cout << "  | " << cell(row.gpass, 16) << cell(row.gfail, 8) << cell(row.gskip, 9);
    std::cout << "\n";
  };
  for (const auto& [op, row] : rows) print_row(op, row);
  print_row("total", total);

  auto list = [&](const char* title, auto pred, auto reason) {
    bool any = false;
    for (const auto& r : results) {
      if (!pred(r)) continue;
      if (!any) std::cout << "\n" << title << ":\n";
      any = true;
      std::cout << "  " << r.name << " (" << r.op << "): " << reason(r) << "\n";
    }
  };
  list(
      "unsupported", [](const Result& r) { return r.status == Status::unsupported; }, [](const Result& r) { return r.reason; });
  if (opt.gradcheck)
    list(
        "gradcheck skipped", [](const Result& r) { return r.grad == GradStatus::skipped; },
        [](const Result& r) { return r.grad_reason; });
  list(
      "FAILED", [](const Result& r) { return r.status == Status::failed; }, [](const Result& r) { return r.reason; });
  if (opt.gradcheck)
    list(
        "gradcheck FAILED", [](const Result& r) { return r.grad == GradStatus::failed; },
        [](const Result& r) { return r.grad_reason; });

  bool failed = total.failed > 0 || total.gfail > 0;
  if (!opt.write_expect.empty()) {
    if (failed) {
      std::cout << "\nnot writing " << opt.write_expect << ": a case failed\n";
    } else {
      write_expectations(results, opt);
      std::cout << "\nwrote the outcomes of " << results.size() << " cases into " << opt.write_expect << "\n";
    }
  }
  if (!opt.expect.empty()) {
    bool whole_suites = true;
    for (const auto& d : opt.dirs) whole_suites = whole_suites && !fs::exists(fs::path(d) / "model.onnx");
    std::vector<std::string> diffs;
    try {
      diffs = compare_expectations(results, opt, whole_suites);
    } catch (const std::exception& e) {
      diffs.push_back(std::string("cannot use the expectations: ") + e.what());
    }
    if (!diffs.empty()) {
      std::cout << "\nDIFFERENT FROM " << opt.expect << " (" << diffs.size() << "):\n";
      for (const auto& d : diffs) std::cout << "  " << d << "\n";
      failed = true;
    } else {
      std::cout << "\nevery case as expected in " << opt.expect << "\n";
    }
  }
  std::cout << "\n"
            << (failed ? "FAILED" : "OK") << ": " << total.passed << " passed, " << total.failed << " failed, "
            << total.unsupported << " unsupported";
  if (opt.gradcheck)
    std::cout << "; gradcheck " << total.gpass << " passed, " << total.gfail << " failed, " << total.gskip << " skipped";
  std::cout << "\n";
  return failed ? 1 : 0;
}
