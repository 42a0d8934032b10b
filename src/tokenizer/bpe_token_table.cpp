#include "tokenizer/bpe_token_table.h"

#include <cstring>

namespace zaya::tok {
namespace {

constexpr uint64_t kMultiplier = 0x9FB21C651E98DF25ull;

uint64_t mix(uint64_t h) {
  h ^= h >> 32;
  h *= kMultiplier;
  h ^= h >> 29;
  return h;
}

}  // namespace

// Eight bytes at a time, multiply-xor mixed; tokens are short, so this beats a general-purpose hash.
uint64_t hash_text(std::string_view text) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (text.size() * kMultiplier);
  size_t at = 0;
  for (; at + 8 <= text.size(); at += 8) {
    uint64_t word;
    std::memcpy(&word, text.data() + at, 8);
    h = (h ^ word) * kMultiplier;
    h ^= h >> 31;
  }
  if (at < text.size()) {
    uint64_t word = 0;
    std::memcpy(&word, text.data() + at, text.size() - at);
    h = (h ^ word) * kMultiplier;
  }
  return mix(h);
}

void TokenTable::reserve(size_t tokens) {
  size_t slot_count = 64;
  while (slot_count < tokens * 2) slot_count *= 2;
  if (slot_count > slots_.size()) rehash(slot_count);
}

void TokenTable::rehash(size_t slot_count) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slot_count, Slot{0, 0, kFree, 0});
  const size_t mask = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.length == kFree) continue;
    size_t at = slot.hash & mask;
    while (slots_[at].length != kFree) at = (at + 1) & mask;
    slots_[at] = slot;
  }
}

void TokenTable::assign(std::string_view token, int32_t id) {
  if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 64 : slots_.size() * 2);
  const uint64_t hash = hash_text(token);
  const size_t mask = slots_.size() - 1;
  size_t at = hash & mask;
  for (; slots_[at].length != kFree; at = (at + 1) & mask) {
    const Slot& slot = slots_[at];
    if (slot.hash == hash && std::string_view(keys_).substr(slot.offset, slot.length) == token) {
      slots_[at].id = id;
      return;
    }
  }
  slots_[at] = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(token.size()), id};
  keys_.append(token);
  ++size_;
}

int32_t TokenTable::find(std::string_view token, uint64_t hash) const {
  if (slots_.empty()) return -1;
  const size_t mask = slots_.size() - 1;
  for (size_t at = hash & mask; slots_[at].length != kFree; at = (at + 1) & mask) {
    const Slot& slot = slots_[at];
    if (slot.hash == hash && slot.length == token.size() &&
        std::memcmp(keys_.data() + slot.offset, token.data(), token.size()) == 0) {
      return slot.id;
    }
  }
  return -1;
}

WordCache& WordCache::of_model(uint64_t model_id) {
  thread_local WordCache cache;
  if (cache.model_id_ != model_id) {
    cache.clear();
    cache.model_id_ = model_id;
  }
  return cache;
}

void WordCache::clear() {
  slots_.assign(kInitialSlots, Slot{0, 0, kFree, 0, 0});
  keys_.clear();
  ids_.clear();
  size_ = 0;
}

void WordCache::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.size() * 2, Slot{0, 0, kFree, 0, 0});
  const size_t mask = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.key_length == kFree) continue;
    size_t at = slot.hash & mask;
    while (slots_[at].key_length != kFree) at = (at + 1) & mask;
    slots_[at] = slot;
  }
}

bool WordCache::find(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
  const size_t mask = slots_.size() - 1;
  for (size_t at = hash & mask; slots_[at].key_length != kFree; at = (at + 1) & mask) {
    const Slot& slot = slots_[at];
    if (slot.hash == hash && slot.key_length == word.size() &&
        std::memcmp(keys_.data() + slot.key_offset, word.data(), word.size()) == 0) {
      out.insert(out.end(), ids_.begin() + slot.ids_offset, ids_.begin() + slot.ids_offset + slot.ids_count);
      return true;
    }
  }
  return false;
}

void WordCache::insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t count) {
  if (size_ >= kMaxWords) clear();
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const size_t mask = slots_.size() - 1;
  size_t at = hash & mask;
  while (slots_[at].key_length != kFree) at = (at + 1) & mask;
  slots_[at] = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
                    static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(count)};
  keys_.append(word);
  ids_.insert(ids_.end(), ids, ids + count);
  ++size_;
}

}  // namespace zaya::tok
