#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <set>

#include <nlohmann/json.hpp>

#include "io/file_util.h"
#include "io/json_util.h"
#include "io/safetensors_header.h"

namespace chorus::io {
namespace {

constexpr uint64_t kLengthBytes = 8;  // little-endian u64 header length at the start of the file

Status check_file_size(uint64_t size, const std::string& label, const SafetensorsLimits& limits) {
  if (size > limits.max_file_bytes)
    return make_error(ErrorCode::kResourceExhausted,
                      label + ": file is " + std::to_string(size) + " bytes, more than the " +
                          std::to_string(limits.max_file_bytes) + "-byte limit");
  if (size < kLengthBytes)
    return make_error(ErrorCode::kInvalidFormat,
                      label + ": file is " + std::to_string(size) +
                          " bytes, too short for the 8-byte header length");
  return ok_status();
}

// Decodes and bounds the header length before anything is allocated for it.
Result<uint64_t> header_length(const unsigned char* le, uint64_t file_size, const std::string& label,
                               const SafetensorsLimits& limits) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | le[i];
  if (n > limits.max_header_bytes)
    return make_error(ErrorCode::kResourceExhausted,
                      label + ": header length " + std::to_string(n) + " exceeds the limit of " +
                          std::to_string(limits.max_header_bytes) + " bytes");
  if (n > file_size - kLengthBytes)
    return make_error(ErrorCode::kInvalidFormat,
                      label + ": header length " + std::to_string(n) + " runs past the end of the " +
                          std::to_string(file_size) + "-byte file");
  return n;
}

Result<std::shared_ptr<AlignedBuffer>> allocate_data(uint64_t bytes, const std::string& label) {
  try {
    // Unfilled: the file's data is copied over all of it next. At least one (zeroed) byte, so that
    // views of empty tensors still have a non-null address.
    if (bytes == 0) return std::make_shared<AlignedBuffer>(1);
    return std::make_shared<AlignedBuffer>(static_cast<size_t>(bytes), AlignedBuffer::Unfilled{});
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kResourceExhausted,
                      label + ": cannot allocate " + std::to_string(bytes) + " bytes for tensor data");
  }
}

// A shard name from an index file must stay inside the checkpoint's directory.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos;
}

Status check_writable_name(const std::string& name, const std::set<std::string>& seen,
                           const std::string& path) {
  if (name.empty() || name == "__metadata__" || !is_valid_utf8(name))
    return make_error(ErrorCode::kInvalidArgument, path + ": invalid tensor name '" + name + "'");
  if (seen.count(name))
    return make_error(ErrorCode::kInvalidArgument, path + ": tensor '" + name + "' given twice");
  return ok_status();
}

}  // namespace

// ---- SafetensorsFile ---------------------------------------------------------------------------

Result<SafetensorsFile> SafetensorsFile::parse(std::string_view bytes, const std::string& label,
                                               const SafetensorsLimits& limits) {
  CHORUS_TRY(check_file_size(bytes.size(), label, limits));
  CHORUS_ASSIGN(const uint64_t n,
                header_length(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                              label, limits));
  const uint64_t data_bytes = bytes.size() - kLengthBytes - n;
  CHORUS_ASSIGN(detail::ParsedHeader h,
                detail::parse_header(bytes.substr(kLengthBytes, n), data_bytes, label, limits));
  SafetensorsFile f;
  CHORUS_ASSIGN(f.data_, allocate_data(data_bytes, label));
  if (data_bytes) std::memcpy(f.data_->data(), bytes.data() + kLengthBytes + n, data_bytes);
  f.path_ = label;
  f.infos_ = std::move(h.infos);
  f.index_ = std::move(h.index);
  f.metadata_ = std::move(h.metadata);
  return f;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path, const SafetensorsLimits& limits) {
  CHORUS_ASSIGN(ReadOnlyFile file, ReadOnlyFile::open(path));
  const uint64_t size = file.size();
  CHORUS_TRY(check_file_size(size, path, limits));
  unsigned char le[kLengthBytes];
  CHORUS_TRY(file.read_at(0, le, kLengthBytes));
  CHORUS_ASSIGN(const uint64_t n, header_length(le, size, path, limits));
  std::string header;
  try {
    header.resize(static_cast<size_t>(n));
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kResourceExhausted, path + ": out of memory reading the header");
  }
  CHORUS_TRY(file.read_at(kLengthBytes, header.data(), n));
  const uint64_t data_bytes = size - kLengthBytes - n;
  CHORUS_ASSIGN(detail::ParsedHeader h, detail::parse_header(header, data_bytes, path, limits));
  header = std::string();  // release before the (possibly large) data allocation

  SafetensorsFile f;
  CHORUS_ASSIGN(f.data_, allocate_data(data_bytes, path));
  CHORUS_TRY(file.read_at(kLengthBytes + n, f.data_->data(), data_bytes));
  CHORUS_TRY(file.expect_end_at(size));
  f.path_ = path;
  f.infos_ = std::move(h.infos);
  f.index_ = std::move(h.index);
  f.metadata_ = std::move(h.metadata);
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &infos_[it->second];
}

Tensor SafetensorsFile::tensor(const TensorInfo& info) const {
  const auto* base = static_cast<const unsigned char*>(data_->data());
  return Tensor::view(info.dtype, info.shape, base + info.begin, data_);
}

uint64_t SafetensorsFile::data_bytes() const { return infos_.empty() ? 0 : infos_.back().end; }

// ---- Checkpoint --------------------------------------------------------------------------------

Result<Checkpoint> Checkpoint::from_files(std::vector<SafetensorsFile> files) {
  Checkpoint c;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    const SafetensorsFile& f = files[fi];
    for (size_t ti = 0; ti < f.tensors().size(); ++ti) {
      const std::string& name = f.tensors()[ti].name;
      const auto [it, inserted] = c.where_.emplace(name, std::make_pair(fi, ti));
      if (!inserted)
        return make_error(ErrorCode::kInvalidFormat, "tensor '" + name + "' is in both " +
                                                         files[it->second.first].path() + " and " +
                                                         f.path());
    }
  }
  if (files.size() == 1) c.label_ = files[0].path();
  else c.label_ = std::to_string(files.size()) + " safetensors files";
  for (SafetensorsFile& f : files) c.files_.push_back(std::make_shared<SafetensorsFile>(std::move(f)));
  return c;
}

namespace {

// Opens the shards an index lists and checks that index and shards agree exactly: every listed
// tensor is in its named shard and every shard tensor is listed under that shard.
Result<std::vector<SafetensorsFile>> open_shards(const std::string& dir, const std::string& index_path,
                                                 const SafetensorsLimits& limits) {
  JsonLimits jl;
  jl.max_bytes = 64ull << 20;
  CHORUS_ASSIGN(const Json index_json, read_json_file(index_path, jl));
  CHORUS_ASSIGN(const JsonObject root, JsonObject::root(index_json, index_path));
  CHORUS_ASSIGN(const std::optional<JsonObject> meta, root.optional_object("metadata"));
  (void)meta;  // only its type is checked; total_size is advisory
  CHORUS_ASSIGN(const JsonObject weight_map, root.object("weight_map"));
  if (weight_map.json().empty())
    return make_error(ErrorCode::kInvalidFormat, index_path + ": weight_map lists no tensors");

  std::map<std::string, std::string, std::less<>> shard_of;  // tensor -> shard file name
  std::set<std::string> shard_names;
  for (const auto& [name, value] : weight_map.json().items()) {
    if (!value.is_string())
      return make_error(ErrorCode::kInvalidFormat,
                        weight_map.where(name) + " must be a shard file name (a string)");
    const std::string shard = value.get<std::string>();
    if (!is_plain_file_name(shard))
      return make_error(ErrorCode::kInvalidFormat,
                        weight_map.where(name) + " = '" + shard +
                            "' is not a plain file name in the checkpoint's directory");
    shard_of.emplace(name, shard);
    shard_names.insert(shard);
  }

  std::vector<SafetensorsFile> files;
  std::map<std::string, size_t> file_of_shard;
  for (const std::string& shard : shard_names) {
    CHORUS_ASSIGN(SafetensorsFile f, SafetensorsFile::open(dir + "/" + shard, limits));
    for (const TensorInfo& t : f.tensors()) {
      const auto it = shard_of.find(t.name);
      if (it == shard_of.end())
        return make_error(ErrorCode::kInvalidFormat, index_path + ": shard " + shard + " holds tensor '" +
                                                         t.name + "', which the index does not list");
      if (it->second != shard)
        return make_error(ErrorCode::kInvalidFormat,
                          index_path + ": shard " + shard + " holds tensor '" + t.name +
                              "', which the index puts in " + it->second);
    }
    file_of_shard.emplace(shard, files.size());
    files.push_back(std::move(f));
  }
  for (const auto& [name, shard] : shard_of) {
    if (!files[file_of_shard.at(shard)].find(name))
      return make_error(ErrorCode::kInvalidFormat, index_path + ": tensor '" + name + "' is mapped to " +
                                                       shard + ", which does not contain it");
  }
  return files;
}

}  // namespace

Result<Checkpoint> Checkpoint::open_dir(const std::string& dir, const std::string& stem,
                                        const SafetensorsLimits& limits) {
  const std::string single = dir + "/" + stem + ".safetensors";
  const std::string index = single + ".index.json";
  std::error_code ec;
  if (std::filesystem::exists(single, ec)) {
    CHORUS_ASSIGN(SafetensorsFile f, SafetensorsFile::open(single, limits));
    std::vector<SafetensorsFile> files;
    files.push_back(std::move(f));
    return from_files(std::move(files));
  }
  if (!std::filesystem::exists(index, ec))
    return make_error(ErrorCode::kNotFound, dir + ": neither " + stem + ".safetensors nor " + stem +
                                                ".safetensors.index.json exists");
  CHORUS_ASSIGN(std::vector<SafetensorsFile> files, open_shards(dir, index, limits));
  CHORUS_ASSIGN(Checkpoint c, from_files(std::move(files)));
  c.label_ = index;
  return c;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) return nullptr;
  return &files_[it->second.first]->tensors()[it->second.second];
}

Tensor Checkpoint::tensor(std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) return Tensor();
  const SafetensorsFile& f = *files_[it->second.first];
  return f.tensor(f.tensors()[it->second.second]);
}

Result<Tensor> Checkpoint::require(std::string_view name, const Shape& shape,
                                   std::initializer_list<DType> dtypes) const {
  const TensorInfo* info = find(name);
  if (!info)
    return make_error(ErrorCode::kNotFound, label_ + ": tensor '" + std::string(name) + "' is missing");
  const std::string where = file_of(name) + ": tensor '" + std::string(name) + "': ";
  if (info->shape != shape)
    return make_error(ErrorCode::kShapeMismatch, where + "shape " + shape_to_string(info->shape) +
                                                     " but the config implies " + shape_to_string(shape));
  if (dtypes.size() != 0 && std::find(dtypes.begin(), dtypes.end(), info->dtype) == dtypes.end()) {
    std::string expected;
    for (DType dt : dtypes) expected += (expected.empty() ? "" : " or ") + std::string(dtype_name(dt));
    return make_error(ErrorCode::kShapeMismatch, where + "dtype " + dtype_name(info->dtype) +
                                                     " but expected " + expected);
  }
  return tensor(name);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, loc] : where_) out.push_back(name);
  return out;
}

std::string Checkpoint::file_of(std::string_view name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? std::string() : files_[it->second.first]->path();
}

uint64_t Checkpoint::total_params() const {
  uint64_t n = 0;
  for (const auto& f : files_)
    for (const TensorInfo& t : f->tensors()) n += static_cast<uint64_t>(shape_numel(t.shape));
  return n;
}

// ---- Writer ------------------------------------------------------------------------------------

namespace {

// The header text: same layout as the reference writer (compact JSON, "__metadata__" first,
// tensors in the given order, padded with spaces so the data section starts 8-byte aligned).
Result<std::string> header_for(const std::string& path, const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) {
      if (!is_valid_utf8(k) || !is_valid_utf8(v))
        return make_error(ErrorCode::kInvalidArgument, path + ": metadata is not valid UTF-8");
      meta[k] = v;
    }
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    CHORUS_TRY(check_writable_name(t.name, seen, path));
    seen.insert(t.name);
    const uint64_t bytes = t.tensor.nbytes();
    if (bytes > 0 && t.tensor.data() == nullptr)
      return make_error(ErrorCode::kInvalidArgument, path + ": tensor '" + t.name + "' has no data");
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = dtype_name(t.tensor.dtype());
    entry["shape"] = t.tensor.shape();
    entry["data_offsets"] = {offset, offset + bytes};
    header[t.name] = std::move(entry);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::string text;
  try {
    CHORUS_ASSIGN(text, header_for(path, tensors, metadata));
  } catch (const std::exception& e) {  // allocation failure; names and metadata are pre-checked
    return make_error(ErrorCode::kResourceExhausted, path + ": " + e.what());
  }

  const std::string tmp = path + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "wb");
  if (!out) return make_error(ErrorCode::kIo, path + ": cannot create " + tmp + ": " + std::strerror(errno));
  unsigned char le[kLengthBytes];
  for (size_t i = 0; i < kLengthBytes; ++i) le[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  bool ok = std::fwrite(le, 1, kLengthBytes, out) == kLengthBytes &&
            std::fwrite(text.data(), 1, text.size(), out) == text.size();
  for (const TensorToWrite& t : tensors) {
    const size_t bytes = t.tensor.nbytes();
    if (ok && bytes) ok = std::fwrite(t.tensor.data(), 1, bytes, out) == bytes;
  }
  ok = (std::fclose(out) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return make_error(ErrorCode::kIo, path + ": write failed: " + std::strerror(err));
  }
  return ok_status();
}

}  // namespace chorus::io
