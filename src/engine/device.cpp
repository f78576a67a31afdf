#include "engine/device.h"

#include <charconv>

namespace chorus::engine {

std::string Device::name() const { return is_cuda() ? "cuda:" + std::to_string(index) : "cpu"; }

Result<Device> Device::parse(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() <= 8) {
    int n = -1;
    const char* b = text.data() + 5;
    const char* e = text.data() + text.size();
    auto [p, ec] = std::from_chars(b, e, n);
    if (ec == std::errc() && p == e && n >= 0) return Device::cuda(n);
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "device: expected cpu, cuda or cuda:N, not \"" + text.substr(0, 32) + "\"");
}

}  // namespace chorus::engine
