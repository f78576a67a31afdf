#include "engine/build_info.h"

#ifdef CHORUS_HAVE_CUDA
#include "runtime/cuda/cuda_device.h"
#endif

namespace chorus {

std::string build_info() {
  std::string s = "chorus 0.1.0; backends: cpu";
#ifdef CHORUS_HAVE_CUDA
  s += ", cuda";
  auto dev = cuda::device_summary(0);
  s += dev.ok() ? " [" + *dev + "]" : " [no usable GPU: " + dev.error().message + "]";
#endif
  return s;
}

}  // namespace chorus
