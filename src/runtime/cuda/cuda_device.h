// Minimal CUDA device queries; the CUDA backend grows around this file.
#pragma once

#include <string>

#include "core/error.h"

namespace chorus::cuda {

// "NVIDIA H200 (sm_90, 139.8 GiB)" for device 0, or an error when no usable GPU is present.
Result<std::string> device_summary(int device = 0);

// The current device's SM count, looked up once per device (launch policies ask on every launch,
// from any thread); 132 if it cannot be asked.
int sm_count();

}  // namespace chorus::cuda
