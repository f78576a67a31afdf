// Reading untrusted files: size known up front (so callers can validate before allocating), exact
// reads that treat a short file as an error rather than a crash, and no exceptions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"

namespace chorus::io {

class ReadOnlyFile {
 public:
  // kNotFound when absent; kIo for other failures and for anything but a regular file (a FIFO or
  // device could block or never end).
  static Result<ReadOnlyFile> open(const std::string& path);
  ~ReadOnlyFile();
  ReadOnlyFile(ReadOnlyFile&& o) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&& o) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // at open time
  // Exactly `n` bytes at `offset`; the file shrinking underneath gives kIo.
  Status read_at(uint64_t offset, void* dst, uint64_t n) const;
  // kIo if the file has grown past `end` since it was opened.
  Status expect_end_at(uint64_t end) const;

 private:
  ReadOnlyFile(int fd, std::string path, uint64_t size) : fd_(fd), path_(std::move(path)), size_(size) {}
  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;
};

// Reads a whole file, refusing (kResourceExhausted) before allocating if it is larger than
// max_bytes.
Result<std::string> read_file_capped(const std::string& path, uint64_t max_bytes);

// Writes `bytes` to `path` (created or truncated).
Status write_file(const std::string& path, std::string_view bytes);

// The environment variable `name`, or "" when unset.
std::string env_or_empty(const char* name);

}  // namespace chorus::io
