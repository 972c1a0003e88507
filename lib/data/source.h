// hpcnn data: sources of samples for the batch loader (data/loader.h), read one sample at a time
// by index, from memory or from the file on demand.
//
//   InMemorySource  every decoded sample in memory (an ImageSet, data/dataset.h).
//   FileSource      uncompressed IDX, NPY or CIFAR-10 binary files read with pread, one sample per
//                   call: memory stays at the labels (4 bytes per sample; none for CIFAR-10, whose
//                   labels are read with the sample) or targets (4 K bytes per sample) whatever
//                   the data set size. Compressed files
//                   (gzip, huffgpu) have no random access and always decode into memory.
//   ConcatSource    several sources one after the other (CIFAR-10 batches, shards).
//   RangeSource     a contiguous range of another source (a held-out validation split).
//
// read() is thread-safe (pread; no shared file position) and may be called concurrently.
// Errors name the file and byte offset (see data/dataset.h): ErrorKind::bad_input when a file
// turns out shorter than its header said (truncated or shrunk since it was opened),
// ErrorKind::io for read errors, ErrorKind::usage for an index out of range.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace hpcnn::data {

class SampleSource {
 public:
  virtual ~SampleSource() = default;

  int64_t size() const { return size_; }                // number of samples
  const SampleInfo& sample() const { return sample_; }  // shape and pixel type of every sample
  bool has_labels() const { return labeled_; }
  int64_t target_width() const { return target_width_; }  // K regression targets per sample (0: none)
  const std::string& origin() const { return origin_; }  // the file(s), for messages
  virtual bool in_memory() const = 0;

  // Sample `index` (0 <= index < size()): sample().bytes() bytes to `pixels` (u8, i16 or float by
  // sample().type, C(D)HW), and its class label to *label when `label` is not null and the source
  // has labels (-1 otherwise).
  virtual void read(int64_t index, void* pixels, int32_t* label) const = 0;
  // The slab `box` of volume sample `index` (data/dataset.h: box_info(sample(), box).bytes() bytes
  // to `pixels`), and its label as read(). Reads only the slab's bytes where the storage allows
  // (FileSource: channels-first .npy of the stored dtype; bytes_read() counts them); otherwise the
  // whole sample, then the copy. ErrorKind::usage for an image sample or a box outside the volume.
  virtual void read_box(int64_t index, const SampleBox& box, void* pixels, int32_t* label) const;
  // Bytes of sample data read from files so far by read()/read_box() (0 for samples in memory:
  // their files were read once, when loaded).
  virtual int64_t bytes_read() const { return 0; }
  // The target_width() regression targets of sample `index` to `targets` (ErrorKind::usage when
  // the source has none). Targets live in memory in every source (4 K bytes per sample).
  virtual void read_targets(int64_t index, float* targets) const;
  // Sample `index` named for messages by its place in the files: "sample 4711 of FILE" (the
  // index within that file for a concatenation or a range of one).
  virtual std::string locate(int64_t index) const;

 protected:
  void check_index(int64_t index) const;
  int64_t size_ = 0;
  SampleInfo sample_;
  bool labeled_ = false;
  int64_t target_width_ = 0;
  std::vector<float> targets_;  // size_ * target_width_ (InMemorySource, FileSource)
  std::string origin_;
};

class InMemorySource final : public SampleSource {
 public:
  explicit InMemorySource(ImageSet images);
  bool in_memory() const override { return true; }
  void read(int64_t index, void* pixels, int32_t* label) const override;
  void read_box(int64_t index, const SampleBox& box, void* pixels, int32_t* label) const override;
  const ImageSet& images() const { return set_; }

 private:
  ImageSet set_;
};

class FileSource final : public SampleSource {
 public:
  // Opens an uncompressed images file (and labels file; empty for none or for CIFAR-10), reading
  // and checking the headers and the labels. ErrorKind::usage for a compressed file (load it with
  // load_images / InMemorySource instead).
  FileSource(const std::string& images_path, const std::string& labels_path);
  ~FileSource() override;
  bool in_memory() const override { return false; }
  void read(int64_t index, void* pixels, int32_t* label) const override;
  void read_box(int64_t index, const SampleBox& box, void* pixels, int32_t* label) const override;
  int64_t bytes_read() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class ConcatSource final : public SampleSource {
 public:
  // The parts must agree in sample shape/type and in having labels (ErrorKind::bad_input).
  explicit ConcatSource(std::vector<std::shared_ptr<const SampleSource>> parts);
  bool in_memory() const override;
  void read(int64_t index, void* pixels, int32_t* label) const override;
  void read_box(int64_t index, const SampleBox& box, void* pixels, int32_t* label) const override;
  int64_t bytes_read() const override;
  void read_targets(int64_t index, float* targets) const override;
  std::string locate(int64_t index) const override;

 private:
  std::vector<std::shared_ptr<const SampleSource>> parts_;
  std::vector<int64_t> starts_;  // first index of each part
  size_t part(int64_t index) const;  // the part that holds sample `index` (checked)
};

// Samples [begin, begin + count) of another source, renumbered from 0: a validation split held
// out of a training set (dist-train's data.validation_samples), or the batches a tool reads.
// ErrorKind::usage when the range does not lie inside the parent.
class RangeSource final : public SampleSource {
 public:
  RangeSource(std::shared_ptr<const SampleSource> parent, int64_t begin, int64_t count);
  bool in_memory() const override { return parent_->in_memory(); }
  void read(int64_t index, void* pixels, int32_t* label) const override;
  void read_box(int64_t index, const SampleBox& box, void* pixels, int32_t* label) const override;
  int64_t bytes_read() const override { return parent_->bytes_read(); }
  void read_targets(int64_t index, float* targets) const override;
  std::string locate(int64_t index) const override { return parent_->locate(begin_ + index); }

 private:
  std::shared_ptr<const SampleSource> parent_;
  int64_t begin_;
};

// A training set and the validation split held out at its end: samples [0, size - validation)
// and [size - validation, size). ErrorKind::usage when nothing would be left to train on (the
// message names data.validation_samples, the configuration key that sets it).
std::pair<std::shared_ptr<const SampleSource>, std::shared_ptr<const SampleSource>> split_validation(
    const std::shared_ptr<const SampleSource>& all, int64_t validation);

struct DataFiles {
  std::vector<std::string> images;  // one or more images files, concatenated in order
  std::vector<std::string> labels;  // empty (no labels, or CIFAR-10), or one per images file (float .npy: targets)
  bool cache = true;                // keep every decoded sample in memory; false: FileSource for
                                    // uncompressed files (compressed ones are decoded into memory)
  int decode_threads = 0;           // huffgpu CPU codec threads (0: all cores)
};

// The source for `files`: InMemorySource when cache, else FileSource per uncompressed file and
// InMemorySource per compressed one (logged), concatenated when there are several.
std::shared_ptr<const SampleSource> open_source(const DataFiles& files);

}  // namespace hpcnn::data
