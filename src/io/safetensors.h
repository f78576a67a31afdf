// safetensors files, validated as the format requires before anything large is allocated:
// header length capped, header valid UTF-8 and a JSON object without duplicate keys, known dtypes,
// shapes whose byte sizes do not overflow, offsets sorted, contiguous, non-overlapping and in
// bounds, and a file length matching the header exactly. Tensor data is read into owned memory
// (no mmap of untrusted files: a file truncated while mapped would raise SIGBUS).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace chorus::io {

struct SafetensorsLimits {
  // RELIABILITY.md §1.1: below the format's own 100 MB cap. Real headers are ~100 KB; parsing costs
  // about 3x the header in bookkeeping, so this also bounds what a hostile header can make us hold.
  uint64_t max_header_bytes = 16ull << 20;
  uint64_t max_file_bytes = 64ull << 30;
  int max_rank = 8;
  uint64_t max_tensors = 1u << 20;
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Validates and loads `path`. Errors name the file and, where one is at fault, the tensor.
  static Result<SafetensorsFile> open(const std::string& path, const SafetensorsLimits& limits = {});
  // The same checks on bytes in memory (`label` names them in errors); used by tests and fuzzers.
  static Result<SafetensorsFile> parse(std::string_view bytes, const std::string& label,
                                       const SafetensorsLimits& limits = {});

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return infos_; }  // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo* find(std::string_view name) const;
  // A read-only view of a tensor's data; it keeps the file's memory alive.
  Tensor tensor(const TensorInfo& info) const;
  uint64_t data_bytes() const;

 private:
  std::string path_;
  std::vector<TensorInfo> infos_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<AlignedBuffer> data_;  // the data section (after the header), 64-byte aligned
};

// One model's weights: a single model.safetensors or shards listed by model.safetensors.index.json.
class Checkpoint {
 public:
  // `stem` is "model" for model.safetensors / model.safetensors.index.json in `dir`.
  static Result<Checkpoint> open_dir(const std::string& dir, const std::string& stem = "model",
                                     const SafetensorsLimits& limits = {});
  static Result<Checkpoint> from_files(std::vector<SafetensorsFile> files);

  const TensorInfo* find(std::string_view name) const;
  Tensor tensor(std::string_view name) const;  // empty Tensor when absent
  // `name` with the shape (and one of the dtypes; any if empty) the config implies. kNotFound when
  // absent, kShapeMismatch otherwise; both name the tensor, its file and what was expected.
  Result<Tensor> require(std::string_view name, const Shape& shape,
                         std::initializer_list<DType> dtypes = {}) const;
  std::vector<std::string> names() const;      // sorted
  // The file that holds `name` (for error messages).
  std::string file_of(std::string_view name) const;
  uint64_t total_params() const;
  // The file, or the index file of a sharded checkpoint (for error messages).
  const std::string& label() const { return label_; }

 private:
  std::string label_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> where_;  // name -> (file, tensor)
};

// Writes tensors (in the order given) as a safetensors file; used by make-tiny and tests.
struct TensorToWrite {
  std::string name;
  Tensor tensor;
};
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace chorus::io
