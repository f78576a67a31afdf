#include "models/codec/batch_plan.h"

#include <algorithm>
#include <map>

namespace chorus::codec {

std::vector<BatchStep> plan_batch_steps(std::span<const int64_t> frames, std::span<const int64_t> blocks,
                                        int64_t capacity) {
  std::vector<BatchStep> plan;
  if (capacity < 1 || frames.size() != blocks.size()) return plan;
  std::vector<int64_t> left(frames.begin(), frames.end());
  for (;;) {
    std::map<int64_t, std::vector<size_t>> by_n;  // ascending n: a fixed order of the steps
    for (size_t i = 0; i < left.size(); ++i)
      if (left[i] > 0) by_n[std::min({std::max<int64_t>(1, blocks[i]), capacity, left[i]})].push_back(i);
    if (by_n.empty()) return plan;
    for (auto& [n, streams] : by_n) {
      const size_t per = static_cast<size_t>(capacity / n);
      for (size_t at = 0; at < streams.size(); at += per) {
        BatchStep step;
        step.frames = n;
        step.streams.assign(streams.begin() + static_cast<std::ptrdiff_t>(at),
                            streams.begin() + static_cast<std::ptrdiff_t>(std::min(streams.size(), at + per)));
        for (size_t i : step.streams) left[i] -= n;
        plan.push_back(std::move(step));
      }
    }
  }
}

}  // namespace chorus::codec
