// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC 2011). A draw is a pure function of (seed, address), so a stream's random numbers
// never depend on batching, thread count, or which other streams run, and a CUDA kernel can
// reproduce them bit for bit.
#pragma once

#include <array>
#include <cstdint>

namespace chorus::sampling {

// One Philox4x32-10 block: 4 output words from a 128-bit counter and a 64-bit key.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Where a draw sits. Key = the seed; counter = (frame, codebook, stream, draw). `stream` is chosen
// by the request (e.g. to ask for several different takes with one seed), never by a batch slot.
struct DrawAddress {
  uint64_t seed = 0;
  uint32_t stream = 0;
  uint32_t frame = 0;
  uint32_t codebook = 0;
  uint32_t draw = 0;
};

// Uniform double in [0, 1) with 53 random bits: ((w0 << 32 | w1) >> 11) · 2⁻⁵³ of the block at
// `address`.
double uniform53(const DrawAddress& address);

}  // namespace chorus::sampling
