// Tensors: a dtype, a row-major contiguous shape, and memory that is either owned (aligned heap
// buffer, shared between copies of the Tensor) or borrowed (a view into memory someone else owns,
// e.g. a loaded checkpoint). Shapes are small vectors of int64 in PyTorch order ([out, in] for
// linear weights).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace chorus {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_to_string(const Shape& s);  // "[2, 3]"

// 64-byte aligned, zero-initialised heap memory.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);  // zero-filled
  // Only the padding past `bytes` is zeroed: for buffers the caller fills whole at once (a file's
  // data), where zeroing first would write every page one more time.
  struct Unfilled {};
  AlignedBuffer(size_t bytes, Unfilled);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

class Tensor {
 public:
  Tensor() = default;

  // Owned, zero-filled.
  static Tensor zeros(DType dt, Shape shape);
  // Borrowed: the caller keeps `data` alive (keeper, if given, is held by the tensor).
  static Tensor view(DType dt, Shape shape, const void* data, std::shared_ptr<const void> keeper = {});
  // Owned f32 copy of any float tensor.
  Tensor to_f32() const;

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool empty() const { return data_ == nullptr; }

  const void* data() const { return data_; }
  // Mutable access: only for owned tensors (views of checkpoints are read-only).
  void* mutable_data() { return owned_ ? const_cast<void*>(data_) : nullptr; }

  template <class T> const T* as() const { return static_cast<const T*>(data_); }
  template <class T> T* mut() { return static_cast<T*>(mutable_data()); }
  const float* f32() const { return as<float>(); }
  float* f32() { return mut<float>(); }

  // Same memory, new shape with the same element count.
  Tensor reshaped(Shape shape) const;

 private:
  // Owned; zero-filled unless `unfilled` (the caller writes every element next).
  static Tensor allocate(DType dt, Shape shape, bool unfilled);

  DType dtype_ = DType::kF32;
  Shape shape_;
  const void* data_ = nullptr;
  bool owned_ = false;
  std::shared_ptr<const void> keeper_;
};

}  // namespace chorus
