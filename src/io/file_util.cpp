#include "io/file_util.h"

#include <fstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

namespace chorus::io {
namespace {

Error errno_error(const std::string& path, const char* what, int err) {
  const ErrorCode code = (err == ENOENT || err == ENOTDIR) ? ErrorCode::kNotFound : ErrorCode::kIo;
  return make_error(code, path + ": " + what + ": " + std::strerror(err));
}

}  // namespace

Result<ReadOnlyFile> ReadOnlyFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer before fstat could reject it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno_error(path, "cannot open", errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return errno_error(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::kIo, path + ": not a regular file");
  }
  return ReadOnlyFile(fd, path, static_cast<uint64_t>(st.st_size));
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& o) noexcept
    : fd_(o.fd_), path_(std::move(o.path_)), size_(o.size_) {
  o.fd_ = -1;
}

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    size_ = o.size_;
    o.fd_ = -1;
  }
  return *this;
}

Status ReadOnlyFile::read_at(uint64_t offset, void* dst, uint64_t n) const {
  // Linux transfers at most ~2 GiB per call, so large reads loop.
  constexpr uint64_t kMaxChunk = 1ull << 30;
  auto* out = static_cast<char*>(dst);
  while (n > 0) {
    const size_t want = static_cast<size_t>(n < kMaxChunk ? n : kMaxChunk);
    const ssize_t got = ::pread(fd_, out, want, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno_error(path_, "read failed", errno);
    }
    if (got == 0)
      return make_error(ErrorCode::kIo, path_ + ": file shrank while being read (" +
                                            std::to_string(n) + " bytes missing at offset " +
                                            std::to_string(offset) + ")");
    out += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
  return ok_status();
}

Status ReadOnlyFile::expect_end_at(uint64_t end) const {
  char probe;
  for (;;) {
    const ssize_t got = ::pread(fd_, &probe, 1, static_cast<off_t>(end));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno_error(path_, "read failed", errno);
    if (got > 0) return make_error(ErrorCode::kIo, path_ + ": file grew while being read");
    return ok_status();
  }
}

Result<std::string> read_file_capped(const std::string& path, uint64_t max_bytes) {
  CHORUS_ASSIGN(ReadOnlyFile file, ReadOnlyFile::open(path));
  if (file.size() > max_bytes)
    return make_error(ErrorCode::kResourceExhausted,
                      path + ": file is " + std::to_string(file.size()) + " bytes, more than the " +
                          std::to_string(max_bytes) + "-byte limit");
  std::string text;
  try {
    text.resize(static_cast<size_t>(file.size()));
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kResourceExhausted, path + ": out of memory reading the file");
  }
  CHORUS_TRY(file.read_at(0, text.data(), text.size()));
  CHORUS_TRY(file.expect_end_at(text.size()));
  return text;
}

Status write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(ErrorCode::kIo, path + ": cannot write");
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return out ? ok_status() : make_error(ErrorCode::kIo, path + ": write failed");
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace chorus::io
