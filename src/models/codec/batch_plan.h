// How CudaDecoder::decode_batch cuts the frames of many streams into GPU steps (host logic only,
// so it is tested without a GPU). A step decodes the same number of frames n for each of its
// streams; a stream never steps by more than its block (its ring's size) or than a workspace
// holds, and its steps come in order: the plan goes in rounds, each stream taking its next
// min(block, remaining, capacity) frames in every round, and a round's streams are grouped by
// that n and cut into steps of at most capacity / n streams. Serving (one new frame per stream)
// is one round of one group: ceil(streams · 1 / capacity) steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace chorus::codec {

struct BatchStep {
  int64_t frames = 0;           // n, the same for every stream of the step
  std::vector<size_t> streams;  // indices into the caller's lists, ascending
};

// frames[i] >= 0 new frames of stream i, blocks[i] >= 1, capacity >= 1 frames per step in all.
// Streams with no frames appear in no step.
std::vector<BatchStep> plan_batch_steps(std::span<const int64_t> frames, std::span<const int64_t> blocks,
                                        int64_t capacity);

}  // namespace chorus::codec
