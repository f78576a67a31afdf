// Remembers the ids of recently seen pre-tokenized pieces: natural text repeats the same words, so
// most pieces skip BPE. Bounded (a full shard is simply emptied) and safe to share between threads;
// a thread that finds a shard busy goes without the cache rather than waiting.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace chorus::text {

class PieceCache {
 public:
  static constexpr std::size_t kMaxPieceBytes = 64;  // longer pieces are rare; not worth keeping

  // Appends the cached ids of `piece` and returns true, or returns false.
  bool lookup(std::string_view piece, std::vector<std::int32_t>* ids) const;
  void insert(std::string_view piece, const std::int32_t* ids, std::size_t count) const;

 private:
  static constexpr std::size_t kShards = 16;
  static constexpr std::size_t kMaxEntriesPerShard = 4096;

  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<std::int32_t>, Hash, std::equal_to<>> map;
  };
  static std::size_t shard_of(std::string_view piece);

  mutable std::array<Shard, kShards> shards_;
};

}  // namespace chorus::text
