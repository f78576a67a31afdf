// Deterministic random weights for every tensor of a WeightTable (make-tiny, tests, benchmarks).
// Each tensor's values depend only on (seed, tensor name), so tables can grow without changing
// the weights of existing tensors, and tensors can be generated in parallel.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "io/weight_table.h"

namespace chorus {

// One tensor per spec, in `dtype` (F32 or BF16), initialised by the spec's WeightInit rule.
std::vector<io::TensorToWrite> random_weights(const WeightTable& table, uint64_t seed, DType dtype,
                                              ThreadPool* pool = nullptr);

}  // namespace chorus
