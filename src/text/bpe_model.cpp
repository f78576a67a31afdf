#include "text/bpe_model.h"

#include <algorithm>

#include "text/byte_level.h"

namespace chorus::text {
namespace {

constexpr std::size_t kShortPiece = 32;

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
}

std::uint64_t mix(std::uint64_t k) {
  k ^= k >> 31;
  k *= 0x9E3779B97F4A7C15ull;
  return k ^ (k >> 29);
}

struct Symbol {
  std::int32_t id;
  std::int32_t prev;  // index of the live neighbour, -1 at the ends
  std::int32_t next;
  bool alive;
};

struct Candidate {
  std::uint32_t rank;
  std::int32_t pos;
  std::int32_t result;
};

// Heap order: the smallest (rank, pos) on top.
bool comes_later(const Candidate& a, const Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

// How a token decodes: Hugging Face's ByteLevel decoder maps each character back to its byte, and
// a token with any character outside the alphabet (an added token such as "<think> ") is emitted
// as its own UTF-8 text.
std::string decoded_form(const std::string& token) {
  if (auto bytes = from_byte_level(token)) return *bytes;
  return token;
}

}  // namespace

const BpeModel::MergeSlot* BpeModel::find_merge(std::int32_t left, std::int32_t right) const {
  const std::uint64_t key = pair_key(left, right);
  for (std::uint64_t i = mix(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    const MergeSlot& s = merge_slots_[i];
    if (s.key == key) return &s;
    if (s.key == kEmptyKey) return nullptr;
  }
}

void BpeModel::insert_merge(std::int32_t left, std::int32_t right, std::uint32_t rank, std::int32_t result) {
  const std::uint64_t key = pair_key(left, right);
  for (std::uint64_t i = mix(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    MergeSlot& s = merge_slots_[i];
    if (s.key == key || s.key == kEmptyKey) {  // a repeated pair keeps its last rank, as in Hugging Face
      s = MergeSlot{key, rank, result};
      return;
    }
  }
}

Result<BpeModel> BpeModel::build(const TokenizerDefinition& def) {
  BpeModel m;
  m.ignore_merges_ = def.ignore_merges;
  std::int32_t max_id = -1;
  std::vector<const std::string*> by_id;  // vocab token of each id
  std::unordered_map<std::string, std::int32_t> vocab_ids;
  vocab_ids.reserve(def.vocab.size());
  for (const auto& [token, id] : def.vocab) {
    if (token.empty() || token.size() > kMaxTokenBytes)
      return make_error(ErrorCode::kInvalidFormat, "vocabulary: a token is empty or longer than " +
                                                       std::to_string(kMaxTokenBytes) + " bytes");
    if (id < 0 || id > kMaxTokenId) return make_error(ErrorCode::kInvalidFormat, "vocabulary: id out of range");
    if (static_cast<std::size_t>(id) >= by_id.size()) by_id.resize(static_cast<std::size_t>(id) + 1, nullptr);
    if (by_id[id] != nullptr)
      return make_error(ErrorCode::kInvalidFormat, "vocabulary: id " + std::to_string(id) + " is used by both '" +
                                                       *by_id[id] + "' and '" + token + "'");
    by_id[id] = &token;
    vocab_ids.emplace(token, id);
    max_id = std::max(max_id, id);
  }

  // Added tokens: either a fresh id or the id their content already has in the vocabulary.
  m.token_ids_ = vocab_ids;
  std::vector<const std::string*> added_by_id(by_id.size(), nullptr);
  std::unordered_map<std::string, std::int32_t> added_ids;
  for (const AddedTokenSpec& t : def.added_tokens) {
    if (t.id < 0 || t.id > kMaxTokenId) return make_error(ErrorCode::kInvalidFormat, "added token id out of range");
    if (static_cast<std::size_t>(t.id) < by_id.size() && by_id[t.id] != nullptr && *by_id[t.id] != t.content)
      return make_error(ErrorCode::kInvalidFormat, "added token '" + t.content + "' has id " + std::to_string(t.id) +
                                                       ", which the vocabulary gives to '" + *by_id[t.id] + "'");
    auto [it, fresh] = added_ids.emplace(t.content, t.id);
    if (!fresh && it->second != t.id)
      return make_error(ErrorCode::kInvalidFormat, "added token '" + t.content + "' appears with two ids");
    if (static_cast<std::size_t>(t.id) >= added_by_id.size()) added_by_id.resize(static_cast<std::size_t>(t.id) + 1, nullptr);
    if (added_by_id[t.id] != nullptr && *added_by_id[t.id] != t.content)
      return make_error(ErrorCode::kInvalidFormat, "two added tokens share id " + std::to_string(t.id));
    added_by_id[t.id] = &t.content;
    m.token_ids_.insert_or_assign(t.content, t.id);
    max_id = std::max(max_id, t.id);
  }
  if (max_id < 0) return make_error(ErrorCode::kInvalidFormat, "vocabulary: empty");

  // Decoded bytes of every id.
  m.decode_offsets_.assign(static_cast<std::size_t>(max_id) + 2, 0);
  for (std::int32_t id = 0; id <= max_id; ++id) {
    m.decode_offsets_[id] = static_cast<std::uint32_t>(m.decode_blob_.size());
    const std::string* added = static_cast<std::size_t>(id) < added_by_id.size() ? added_by_id[id] : nullptr;
    const std::string* vocab = static_cast<std::size_t>(id) < by_id.size() ? by_id[id] : nullptr;
    if (const std::string* token = added ? added : vocab) m.decode_blob_ += decoded_form(*token);
  }
  m.decode_offsets_[static_cast<std::size_t>(max_id) + 1] = static_cast<std::uint32_t>(m.decode_blob_.size());

  m.byte_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_ids.find(to_byte_level(std::string(1, static_cast<char>(b))));
    if (it != vocab_ids.end()) m.byte_ids_[b] = it->second;
  }
  if (m.ignore_merges_) {
    for (const auto& [token, id] : def.vocab) {
      if (auto bytes = from_byte_level(token)) m.whole_piece_ids_.emplace(std::move(*bytes), id);
    }
  }

  // Merges: both parts and their concatenation must be vocabulary tokens.
  if (def.merges.size() > static_cast<std::size_t>(kMaxTokenId) + 1)
    return make_error(ErrorCode::kInvalidFormat, "merges: more merges than the id limit allows");
  std::size_t slots = 16;
  while (slots < def.merges.size() * 2) slots <<= 1;
  m.merge_slots_.assign(slots, MergeSlot{kEmptyKey, 0, 0});
  m.merge_mask_ = slots - 1;
  auto vocab_id = [&](const std::string& token) -> std::optional<std::int32_t> {
    auto it = vocab_ids.find(token);
    if (it == vocab_ids.end()) return std::nullopt;
    return it->second;
  };
  for (std::size_t rank = 0; rank < def.merges.size(); ++rank) {
    const auto& [left, right] = def.merges[rank];
    const auto l = vocab_id(left), r = vocab_id(right), result = vocab_id(left + right);
    if (!l || !r || !result)
      return make_error(ErrorCode::kInvalidFormat, "merges: merge " + std::to_string(rank + 1) + " ('" + left + "' '" +
                                                       right + "') uses or makes a token not in the vocabulary");
    m.insert_merge(*l, *r, static_cast<std::uint32_t>(rank), *result);
  }
  std::vector<bool> made(static_cast<std::size_t>(max_id) + 1, false);
  m.merge_results_unique_ = true;
  for (const MergeSlot& s : m.merge_slots_) {
    if (s.key == kEmptyKey) continue;
    if (made[s.result]) m.merge_results_unique_ = false;
    made[s.result] = true;
  }
  return m;
}

std::optional<std::int32_t> BpeModel::token_id(std::string_view token) const {
  auto it = token_ids_.find(std::string(token));
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

std::string_view BpeModel::decoded_bytes(std::int32_t id) const {
  if (id < 0 || id >= id_limit()) return {};
  return std::string_view(decode_blob_).substr(decode_offsets_[id], decode_offsets_[id + 1] - decode_offsets_[id]);
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<std::int32_t>* ids) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {
    auto it = whole_piece_ids_.find(std::string(bytes));
    if (it != whole_piece_ids_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  if (merge_results_unique_ && bytes.size() <= kShortPiece) {
    merge_short(bytes, ids);
  } else {
    merge_symbols(bytes, ids);
  }
}

// The same merges as merge_symbols() for a short piece: keep the rank of every adjacent pair in a
// small array and apply the lowest (leftmost on ties) until no pair has a merge.
void BpeModel::merge_short(std::string_view bytes, std::vector<std::int32_t>* ids) const {
  constexpr std::uint32_t kNone = ~0u;
  std::int32_t sym[kShortPiece];
  std::uint32_t rank[kShortPiece];  // rank[i]: merge of sym[i], sym[i + 1]
  std::int32_t result[kShortPiece];
  std::size_t n = 0;
  for (unsigned char b : bytes) {
    if (byte_ids_[b] >= 0) sym[n++] = byte_ids_[b];
  }
  auto rank_pair = [&](std::size_t i) {
    const MergeSlot* s = find_merge(sym[i], sym[i + 1]);
    rank[i] = s ? s->rank : kNone;
    result[i] = s ? s->result : 0;
  };
  for (std::size_t i = 0; i + 1 < n; ++i) rank_pair(i);
  while (n > 1) {
    std::size_t best = 0;
    for (std::size_t i = 1; i + 1 < n; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == kNone) break;
    sym[best] = result[best];
    for (std::size_t i = best + 1; i + 1 < n; ++i) {
      sym[i] = sym[i + 1];
      rank[i] = rank[i + 1];
      result[i] = result[i + 1];
    }
    --n;
    if (best > 0) rank_pair(best - 1);
    if (best + 1 < n) rank_pair(best);
  }
  ids->insert(ids->end(), sym, sym + n);
}

void BpeModel::merge_symbols(std::string_view bytes, std::vector<std::int32_t>* ids) const {
  // Scratch buffers reused across calls on this thread; a piece never allocates once they are warm.
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();
  for (unsigned char b : bytes) {
    // A byte with no token is dropped, as Hugging Face does without an unknown token.
    if (byte_ids_[b] < 0) continue;
    const auto n = static_cast<std::int32_t>(symbols.size());
    symbols.push_back(Symbol{byte_ids_[b], n - 1, n + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeSlot* s = find_merge(symbols[i].id, symbols[i + 1].id))
      heap.push_back(Candidate{s->rank, static_cast<std::int32_t>(i), s->result});
  }
  std::make_heap(heap.begin(), heap.end(), comes_later);
  auto push = [&](const Candidate& c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), comes_later);
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), comes_later);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& cur = symbols[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    const std::int32_t right_pos = cur.next;
    const Symbol right = symbols[right_pos];
    // Stale entry: the pair at this position changed since it was queued.
    const MergeSlot* now = find_merge(cur.id, right.id);
    if (now == nullptr || now->result != top.result) continue;
    cur.id = top.result;
    cur.next = right.next;
    symbols[right_pos].alive = false;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const MergeSlot* s = find_merge(symbols[cur.prev].id, cur.id)) push(Candidate{s->rank, cur.prev, s->result});
    }
    if (cur.next >= 0) {
      if (const MergeSlot* s = find_merge(cur.id, symbols[cur.next].id)) push(Candidate{s->rank, top.pos, s->result});
    }
  }
  for (const Symbol& s : symbols) {
    if (s.alive) ids->push_back(s.id);
  }
  // Do not let one huge piece pin its scratch memory for the life of the thread.
  constexpr std::size_t kKeepSymbols = 1 << 16;
  if (symbols.capacity() > kKeepSymbols) std::vector<Symbol>().swap(symbols);
  if (heap.capacity() > kKeepSymbols) std::vector<Candidate>().swap(heap);
}

}  // namespace chorus::text
