#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace {
fs::path fresh_dir() {
  fs::path d = fs::temp_directory_path() / ("hpcnn_atomic_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
size_t entries(const fs::path& d) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(d), fs::directory_iterator()));
}
}  // namespace

TEST_CASE("AtomicFile: an uncommitted file leaves nothing behind", "[core]") {
  const fs::path d = fresh_dir();
  {
    hpcnn::AtomicFile f(d / "out.bin");
    f.write("abc", 3);
    CHECK(fs::exists(f.temp_path()));
  }
  CHECK(entries(d) == 0);
  fs::remove_all(d);
}

TEST_CASE("AtomicFile: commit replaces the target in one step", "[core]") {
  const fs::path d = fresh_dir();
  { std::ofstream(d / "out.bin") << "old"; }
  hpcnn::AtomicFile f(d / "out.bin");
  f.write("new data", 8);
  CHECK(hpcnn::read_file(d / "out.bin") == "old");  // untouched until commit
  f.commit();
  CHECK(hpcnn::read_file(d / "out.bin") == "new data");
  CHECK(entries(d) == 1);
  fs::remove_all(d);
}

TEST_CASE("AtomicFile: refuses an existing target without overwrite", "[core]") {
  const fs::path d = fresh_dir();
  { std::ofstream(d / "out.bin") << "old"; }
  try {
    hpcnn::AtomicFile f(d / "out.bin", /*overwrite=*/false);
    FAIL("no error");
  } catch (const hpcnn::Error& e) {
    CHECK(e.kind() == hpcnn::ErrorKind::io);
    CHECK(std::string(e.what()).find("already exists") != std::string::npos);
  }
  CHECK(entries(d) == 1);
  fs::remove_all(d);
}

TEST_CASE("AtomicFile: missing folders are created; a file in the path is an I/O error naming it", "[core]") {
  const fs::path d = fresh_dir();
  {
    hpcnn::AtomicFile f(d / "a" / "b" / "x.onnx");
    f.write("x", 1);
    f.commit();
  }
  CHECK(hpcnn::read_file(d / "a" / "b" / "x.onnx") == "x");
  { std::ofstream(d / "file") << "not a folder"; }
  try {
    hpcnn::AtomicFile f(d / "file" / "sub" / "x.onnx");
    FAIL("no error");
  } catch (const hpcnn::Error& e) {
    CHECK(e.kind() == hpcnn::ErrorKind::io);
    CHECK(e.exit_code() == 3);
    CHECK_THAT(e.what(), Catch::Contains("'" + (d / "file").string() + "' exists and is not a folder"));
  }
  CHECK(hpcnn::read_file(d / "file") == "not a folder");
  fs::remove_all(d);
}
