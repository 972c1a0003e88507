// The training-data option group of the tool frame (tools/common/data_options.h).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "common/data_options.h"
#include "common/numbers.h"
#include "core/error.h"
#include "error_check.h"

using namespace hpcnn;

namespace {
tool::TrainingData parse(std::vector<std::string> args) {
  CLI::App app;
  tool::DataOptions o;
  tool::add_data_options(app, o);
  std::vector<std::string> rev(args.rbegin(), args.rend());
  app.parse(rev);
  return tool::resolve_data_options(o);
}
}  // namespace

TEST_CASE("training data from --data/--labels/--mean/--std or from a dist-train configuration", "[tools]") {
  auto d = parse({"--data", "imgs.idx", "--labels", "lbl.idx", "--mean", "0.49,0.48,0.45", "--std", "0.25,0.24,0.26"});
  CHECK(d.data.train_images == "imgs.idx");
  CHECK(d.data.train_labels == "lbl.idx");
  CHECK(d.augmentation.mean == std::vector<float>{0.49f, 0.48f, 0.45f});
  CHECK(d.augmentation.std == std::vector<float>{0.25f, 0.24f, 0.26f});

  const auto cfg = std::filesystem::temp_directory_path() / ("hpcnn_data_options_" + std::to_string(::getpid()) + ".json");
  std::ofstream(cfg) << R"({"data": {"train_images": "t.idx.gz", "train_labels": "l.idx.gz", "cache": false},
                           "augmentation": {"crop_padding": 4, "mean": [0.286], "std": [0.353]}})";
  d = parse({"--config", cfg.string()});
  CHECK(d.data.train_images == "t.idx.gz");
  CHECK(d.data.train_labels == "l.idx.gz");
  CHECK(d.augmentation.mean == std::vector<float>{0.286f});
  CHECK(d.augmentation.std == std::vector<float>{0.353f});
  CHECK(d.augmentation.crop_padding == 4);
  CHECK_FALSE(d.data.cache);
  CHECK(d.data.prefetch == 4);  // the default

  using testing::check_error;
  check_error([&] { parse({"--config", cfg.string(), "--data", "x"}); }, ErrorKind::usage, "give --config TRAIN.json, or --data");
  check_error([] { parse({}); }, ErrorKind::usage, "give --config TRAIN.json, or --data");
  check_error([] { parse({"--data", "x", "--mean", "0.5"}); }, ErrorKind::usage, "--data needs --mean and --std");
  check_error([] { parse({"--data", "x", "--mean", "0.5,a", "--std", "1"}); }, ErrorKind::usage, "'a' is not a number");
  check_error([] { parse({"--data", "x", "--mean", "0.5,0.5", "--std", "1"}); }, ErrorKind::usage, "same number of values");
  check_error([] { parse({"--data", "x", "--mean", "0.5", "--std", "0"}); }, ErrorKind::usage, "must be > 0");
  // The data sections are checked as dist-train checks them; the other keys are dist-train's.
  std::ofstream(cfg) << R"({"data": {"train_image": "t.idx"}, "optimiser": {}})";
  check_error([&] { parse({"--config", cfg.string()}); }, ErrorKind::usage, "unknown configuration key 'data.train_image'");
  std::ofstream(cfg) << R"({"data": {"train_images": "t.idx"}, "augmentation": {"mean": [0.5], "std": [0.5, 0.5]}})";
  check_error([&] { parse({"--config", cfg.string()}); }, ErrorKind::usage, "one value per channel");
  std::ofstream(cfg) << R"({"data": {"train_images": "t.idx"}, "augmentation": {"erasing_scale": [0.1, 0.2, 0.3]}})";
  check_error([&] { parse({"--config", cfg.string()}); }, ErrorKind::usage, "augmentation.erasing_scale must be [min, max]");
  std::ofstream(cfg) << R"({"data": {"train_images": "t.idx", "prefetch": "4"}})";
  check_error([&] { parse({"--config", cfg.string()}); }, ErrorKind::usage, "'data.prefetch' must be a JSON number");
  std::ofstream(cfg) << R"({"data": {"train_images": "t.idx"}, "optimiser": {}})";
  CHECK(parse({"--config", cfg.string()}).data.train_images == "t.idx");
  std::filesystem::remove(cfg);
}

TEST_CASE("flags checked > 0 or >= 0 say what they need and what they got", "[tools]") {
  const auto message = [](const CLI::Validator& check, std::string value) {
    CLI::App app;
    double v = 0;
    app.add_option("--n", v)->check(check);
    std::vector<std::string> args{value, "--n"};  // CLI11 parses a reversed vector
    try {
      app.parse(args);
    } catch (const CLI::ValidationError& e) {
      return std::string(e.what());
    }
    return std::string("accepted ") + std::to_string(v);
  };
  CHECK(message(tool::positive_number, "0") == "--n: must be > 0, got 0");
  CHECK(message(tool::positive_number, "1e-300") == "accepted 0.000000");
  CHECK(message(tool::positive_number, "2x") == "--n: '2x' is not a number");
  CHECK(message(tool::non_negative_number, "0") == "accepted 0.000000");
  CHECK(message(tool::non_negative_number, "-1") == "--n: must be >= 0, got -1");
  CHECK(message(tool::non_negative_number, "nan") == "--n: must be >= 0, got nan");
}
