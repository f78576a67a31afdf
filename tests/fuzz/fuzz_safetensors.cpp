// libFuzzer target: SafetensorsFile::parse on arbitrary bytes must return a value or a typed error,
// never crash, and whatever it accepts must satisfy the format's invariants.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  io::SafetensorsLimits limits;
  limits.max_header_bytes = 1 << 20;  // keep single inputs cheap; the checks are the same
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto f = io::SafetensorsFile::parse(bytes, "fuzz", limits);
  if (!f.ok()) {
    if (f.error().message.rfind("fuzz: ", 0) != 0) std::abort();  // errors name their input
    return 0;
  }
  // Accepted: tensors tile the data section exactly and each view is readable end to end.
  uint64_t expect = 0;
  unsigned sum = 0;
  for (const io::TensorInfo& t : f->tensors()) {
    if (t.begin != expect || t.end < t.begin) std::abort();
    const Tensor view = f->tensor(t);
    if (view.nbytes() != t.end - t.begin) std::abort();
    const auto* p = static_cast<const unsigned char*>(view.data());
    for (uint64_t i = 0; i < view.nbytes(); ++i) sum += p[i];
    if (f->find(t.name) != &t) std::abort();
    expect = t.end;
  }
  if (expect != f->data_bytes() || 8 + f->data_bytes() > size) std::abort();
  return static_cast<int>(sum & 0);
}
