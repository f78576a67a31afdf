#include "core/tensor.h"

#include <cstdlib>
#include <new>

namespace chorus {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_to_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

AlignedBuffer::AlignedBuffer(size_t bytes) : AlignedBuffer(bytes, Unfilled{}) {
  if (data_) std::memset(data_, 0, bytes);
}

AlignedBuffer::AlignedBuffer(size_t bytes, Unfilled) : size_(bytes) {
  if (bytes == 0) return;
  const size_t rounded = (bytes + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded);
  if (!data_) throw std::bad_alloc();
  std::memset(static_cast<char*>(data_) + bytes, 0, rounded - bytes);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

Tensor Tensor::zeros(DType dt, Shape shape) { return allocate(dt, std::move(shape), false); }

Tensor Tensor::allocate(DType dt, Shape shape, bool unfilled) {
  Tensor t;
  t.dtype_ = dt;
  t.shape_ = std::move(shape);
  // At least one byte, zeroed when nothing will be written.
  const size_t bytes = t.nbytes();
  auto buf = unfilled && bytes > 0 ? std::make_shared<AlignedBuffer>(bytes, AlignedBuffer::Unfilled{})
                                   : std::make_shared<AlignedBuffer>(std::max<size_t>(bytes, 1));
  t.data_ = buf->data();
  t.keeper_ = std::move(buf);
  t.owned_ = true;
  return t;
}

Tensor Tensor::view(DType dt, Shape shape, const void* data, std::shared_ptr<const void> keeper) {
  Tensor t;
  t.dtype_ = dt;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.keeper_ = std::move(keeper);
  return t;
}

Tensor Tensor::to_f32() const {
  Tensor out = allocate(DType::kF32, shape_, true);
  convert_to_f32(dtype_, data_, out.f32(), static_cast<size_t>(numel()));
  return out;
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

}  // namespace chorus
