#include "text/piece_cache.h"

namespace chorus::text {

std::size_t PieceCache::shard_of(std::string_view piece) {
  // Cheap and independent of the map's own hash: first and last bytes and the length.
  const std::size_t a = piece.empty() ? 0 : static_cast<unsigned char>(piece.front());
  const std::size_t b = piece.empty() ? 0 : static_cast<unsigned char>(piece.back());
  return (a * 31 + b * 7 + piece.size()) % kShards;
}

bool PieceCache::lookup(std::string_view piece, std::vector<std::int32_t>* ids) const {
  Shard& shard = shards_[shard_of(piece)];
  std::unique_lock lock(shard.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  auto it = shard.map.find(piece);
  if (it == shard.map.end()) return false;
  ids->insert(ids->end(), it->second.begin(), it->second.end());
  return true;
}

void PieceCache::insert(std::string_view piece, const std::int32_t* ids, std::size_t count) const {
  if (piece.size() > kMaxPieceBytes) return;
  Shard& shard = shards_[shard_of(piece)];
  std::unique_lock lock(shard.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
  shard.map.emplace(std::string(piece), std::vector<std::int32_t>(ids, ids + count));
}

}  // namespace chorus::text
