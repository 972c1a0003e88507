#include "huffgpu-common/file_job.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "common/outputs.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/threads.h"
#include "huffman/bitstream.h"
#include "huffman/codec.h"
#include "huffman/stream.h"

namespace hpcnn::huffgpu {
using namespace hpcnn::huffman;
namespace fs = std::filesystem;
namespace {

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ > 2) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void write_fd(int fd, const uint8_t* p, size_t n, const std::string& what) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_error(ErrorKind::io, "cannot write " + what + ": " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

std::string output_name(const FileJobOptions& o, const std::string& input) {
  if (!o.output.empty()) return o.output;
  if (o.encode) return input + kExtension;
  const std::string ext = kExtension;
  const std::string name = fs::path(input).filename().string();
  if (name.size() <= ext.size() || name.compare(name.size() - ext.size(), ext.size(), ext) != 0)
    throw_error(ErrorKind::usage, "'" + input + "' does not end in " + ext + " after a name; name the output with -o or use -c");
  return input.substr(0, input.size() - ext.size());
}

// ": it is gzip-compressed already (...)" when the first bytes are a compressed format's magic.
std::string compressed_hint(const uint8_t h[6]) {
  struct Magic {
    const char* name;
    std::string bytes;
  };
  static const Magic magics[] = {{"gzip", "\x1f\x8b"},
                                 {"zstd", "\x28\xb5\x2f\xfd"},
                                 {"xz",
                                  "\xfd"
                                  "7zXZ"},
                                 {"bzip2", "BZh"},
                                 {"huffgpu", "HUFG"},
                                 {"zip", "PK\x03\x04"},
                                 {"PNG", "\x89PNG"},
                                 {"JPEG", "\xff\xd8\xff"}};
  for (const Magic& m : magics)
    if (std::memcmp(h, m.bytes.data(), m.bytes.size()) == 0)
      return std::string(": it is ") + m.name + "-compressed already, and Huffman coding cannot shrink compressed data" +
             (std::string(m.name) == "gzip" ? " (decompress it first: gzip -dc FILE | huffgpu-encode -c > FILE.huf)" : "");
  return " (random or compressed data)";
}

void process_one(const FileJobOptions& o, const FileHeader& header, const std::string& input, int threads,
                 const ChunkCodec& codec, const std::string& device, nlohmann::ordered_json& stats) {
  const bool from_stdin = input == "-";
  const bool data_to_stdout = !o.test_only && (o.to_stdout || (from_stdin && o.output.empty()));
  if (data_to_stdout && o.encode && ::isatty(STDOUT_FILENO))
    throw_error(ErrorKind::usage, "refusing to write compressed data to a terminal (use -o FILE or redirect stdout)");
  if (!o.encode && from_stdin && ::isatty(STDIN_FILENO))
    throw_error(ErrorKind::usage, "refusing to read compressed data from a terminal");
  Fd in(from_stdin ? STDIN_FILENO : ::open(input.c_str(), O_RDONLY));
  if (in.get() < 0) throw_error(ErrorKind::io, "cannot open '" + input + "': " + std::strerror(errno));
  struct stat st {};
  if (!from_stdin && ::fstat(in.get(), &st) != 0)
    throw_error(ErrorKind::io, "cannot stat '" + input + "': " + std::strerror(errno));
  if (!from_stdin && S_ISDIR(st.st_mode)) throw_error(ErrorKind::io, "'" + input + "' is a directory");

  std::unique_ptr<AtomicFile> out;
  std::string out_name = "stdout";
  if (!data_to_stdout && !o.test_only) {
    out_name = output_name(o, input);
    tool::prepare_outputs({{out_name, "output"}}, {from_stdin ? fs::path() : fs::path(input)}, o.force);
    out = std::make_unique<AtomicFile>(out_name, o.force);
    if (S_ISREG(st.st_mode)) {  // as gzip and zstd: the input's permission bits and modification time
      out->set_mode(st.st_mode);
      out->set_mtime(st.st_mtim);
    }
  }
  uint8_t in_head[6] = {};  // a regular file's first bytes, to name a compressed format it may be in
  if (o.encode && S_ISREG(st.st_mode)) (void)!::pread(in.get(), in_head, sizeof in_head, 0);
  Checksum64Stream written;  // of everything passed through the sink, to verify a write before --rm
  Sink sink = [&](const uint8_t* p, size_t n) {
    if (o.remove_inputs) written.add(p, n);
    if (o.test_only) return;
    if (out)
      out->write(p, n);
    else
      write_fd(STDOUT_FILENO, p, n, "to stdout");
  };
  const auto t0 = std::chrono::steady_clock::now();
  StreamStats s = o.encode ? encode_stream(in.get(), sink, header, codec) : decode_stream(in.get(), sink, codec);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (out) out->commit();

  if (o.remove_inputs && !from_stdin && out) {
    // Verify the write: encode -> decode the output again; decode -> re-read and hash it.
    Fd check(::open(out_name.c_str(), O_RDONLY));
    if (check.get() < 0) throw_error(ErrorKind::io, "cannot reopen '" + out_name + "' to verify it");
    if (o.encode) {
      decode_stream(
          check.get(), [](const uint8_t*, size_t) {}, codec);
    } else {
      Checksum64Stream reread;
      std::vector<uint8_t> buf(1 << 20);
      for (size_t n; (n = read_full(check.get(), buf.data(), buf.size())) > 0;) reread.add(buf.data(), n);
      if (reread.value() != written.value())
        throw_error(ErrorKind::io, "'" + out_name + "' does not read back as written; keeping '" + input + "'");
    }
    if (::unlink(input.c_str()) != 0) throw_error(ErrorKind::io, "cannot remove '" + input + "': " + std::strerror(errno));
  }
  const uint64_t orig = s.original_bytes, enc = s.encoded_bytes;
  if (o.encode && enc > orig && orig > 0)
    spdlog::warn("{}: {} -> {} bytes (+{:.2f}%): the data do not compress{}", input, orig, enc,
                 100.0 * static_cast<double>(enc - orig) / static_cast<double>(orig), compressed_hint(in_head));
  stats = {{"file", input},
           {"output", o.test_only ? "" : out_name},
           {"original_bytes", orig},
           {"encoded_bytes", enc},
           {"ratio", orig ? static_cast<double>(enc) / static_cast<double>(orig) : 0.0},
           {"chunks", s.chunks},
           {"seconds", secs},
           {"MB_per_s", secs > 0 ? static_cast<double>(orig) / secs / 1e6 : 0.0},
           {"threads", threads},
           {"device", device}};
  spdlog::debug("{}: {} -> {} bytes ({:.2f}%), {:.1f} MB/s", input, o.encode ? orig : enc, o.encode ? enc : orig,
                orig ? 100.0 * static_cast<double>(enc) / static_cast<double>(orig) : 0.0,
                static_cast<double>(orig) / std::max(secs, 1e-9) / 1e6);
}

// Before any file is processed: no input's output may be another input (`-f b b.huf` would
// replace b.huf before reading it as the next input, and `-f a.huf a` the input a.huf after
// it was read). gzip and zstd go ahead; here the whole command is refused (ErrorKind::usage).
void refuse_outputs_that_are_inputs(const FileJobOptions& o, const std::vector<std::string>& inputs) {
  // Inputs by inode (those that exist) and by normalised absolute path: one lookup per output.
  std::map<std::pair<dev_t, ino_t>, size_t> by_inode;
  std::map<fs::path, size_t> by_path;
  std::error_code ec;
  for (size_t j = 0; j < inputs.size(); ++j) {
    if (inputs[j] == "-") continue;
    struct stat st {};
    if (::stat(inputs[j].c_str(), &st) == 0) by_inode.emplace(std::make_pair(st.st_dev, st.st_ino), j);
    by_path.emplace(fs::absolute(inputs[j], ec).lexically_normal(), j);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == "-") continue;
    std::string out;
    try {
      out = output_name(o, inputs[i]);
    } catch (const Error&) {
      continue;  // reported for that file when it is processed
    }
    std::optional<size_t> j;
    struct stat st {};
    if (::stat(out.c_str(), &st) == 0)
      if (auto it = by_inode.find({st.st_dev, st.st_ino}); it != by_inode.end()) j = it->second;
    if (auto it = by_path.find(fs::absolute(out, ec).lexically_normal()); !j && it != by_path.end()) j = it->second;
    if (j && *j != i)
      throw_error(ErrorKind::usage, "the output of '" + inputs[i] + "' would be '" + out + "', which is also an input ('" +
                                        inputs[*j] + "'); nothing was " + (o.encode ? "encoded" : "decoded") +
                                        ": process them in separate commands");
  }
}

}  // namespace

int run_file_jobs(const FileJobOptions& o) {
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    throw_error(ErrorKind::usage, "--device must be auto, cpu or cuda");
  std::vector<std::string> inputs = o.inputs.empty() ? std::vector<std::string>{"-"} : o.inputs;
  if (!o.output.empty() && inputs.size() > 1)
    throw_error(ErrorKind::usage, "-o names one output, but " + std::to_string(inputs.size()) + " inputs were given");
  if (!o.output.empty() && o.to_stdout) throw_error(ErrorKind::usage, "-o and -c exclude each other");
  if (o.encode && o.to_stdout && inputs.size() > 1)
    throw_error(ErrorKind::usage, "-c writes one stream: give one input when encoding");
  FileHeader header;
  if (o.encode) {
    if (o.chunk_size == 0 || o.chunk_size > kMaxChunkSize) throw_error(ErrorKind::usage, "--chunk-size must be 1 B .. 1 GiB");
    if (o.segment_bits != 128 && o.segment_bits != 256) throw_error(ErrorKind::usage, "--segment-bits must be 128 or 256");
    if (o.max_code_length < 8 || o.max_code_length > kMaxCodeLength)
      throw_error(ErrorKind::usage, "--max-code-length must be 8..16");
    header.chunk_size = static_cast<uint32_t>(o.chunk_size);
    header.segment_log2 = o.segment_bits == 128 ? 7 : 8;
    header.code_limit = static_cast<uint8_t>(o.max_code_length);
    header.flags = o.no_gap_array ? 0 : kFlagGapArray;
  }
  if (o.threads < 0) throw_error(ErrorKind::usage, "-T must be >= 0");
  const int threads = o.threads > 0 ? o.threads : default_thread_count();
  // Device: cuda requires a GPU (exit code 5 otherwise); auto falls back to the CPU, saying why under -v.
  const DeviceChoice choice = o.device == "cuda"  ? DeviceChoice::cuda
                              : o.device == "cpu" ? DeviceChoice::cpu
                                                  : DeviceChoice::automatic;
  const SelectedCodec selected = select_codec(choice, threads, o.gpu_memory_cap);
  if (!selected.why.empty()) spdlog::debug("--device auto: {}; using the CPU codec", selected.why);
  const ChunkCodec& codec = selected.codec;
  const std::string& device = selected.device;
  const bool data_to_stdout = o.to_stdout || (inputs.size() == 1 && inputs[0] == "-" && o.output.empty());
  // A pipe on stdout: a 1 MiB buffer (Linux' default is 64 KiB) lets a chunk's output go in a few
  // writes with fewer switches to the reader; a failure (an older kernel, the per-user limit)
  // leaves the default.
  struct stat out_st {};
  if (data_to_stdout && !o.test_only && ::fstat(STDOUT_FILENO, &out_st) == 0 && S_ISFIFO(out_st.st_mode))
    (void)::fcntl(STDOUT_FILENO, F_SETPIPE_SZ, 1 << 20);
  if (!data_to_stdout && !o.test_only) refuse_outputs_that_are_inputs(o, inputs);
  int code = 0;
  for (const auto& input : inputs) {
    try {
      nlohmann::ordered_json stats;
      process_one(o, header, input, threads, codec, device, stats);
      if (o.json) (data_to_stdout && !o.test_only ? std::cerr : std::cout) << stats.dump() << std::endl;
    } catch (const Error& e) {
      std::cerr << o.tool << ": error: " << input << ": " << e.what() << "\n";
      if (code == 0) code = e.exit_code();
    }
  }
  return code;
}

}  // namespace hpcnn::huffgpu
