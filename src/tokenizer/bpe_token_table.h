#pragma once
// Hash tables keyed by token text, for the BPE hot path: the vocabulary (text -> id) and each thread's cache
// of recent words (text -> ids). Keys live in one buffer and each slot keeps the full hash, so a lookup is
// one hash and, almost always, one comparison. Internal to src/data.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zaya::tok {

uint64_t hash_text(std::string_view text);

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return static_cast<size_t>(hash_text(text)); }
};

// Token text -> id, open addressing.
class TokenTable {
 public:
  void reserve(size_t tokens);
  // A token listed again takes the later id.
  void assign(std::string_view token, int32_t id);
  // -1 when absent.
  int32_t find(std::string_view token) const { return find(token, hash_text(token)); }
  int32_t find(std::string_view token, uint64_t hash) const;
  size_t size() const { return size_; }

  template <class Visit>
  void for_each(Visit&& visit) const {
    for (const Slot& slot : slots_) {
      if (slot.length != kFree) visit(std::string_view(keys_).substr(slot.offset, slot.length), slot.id);
    }
  }

 private:
  static constexpr uint32_t kFree = ~uint32_t(0);
  struct Slot {
    uint64_t hash;
    uint32_t offset, length;  // of the key in keys_; length kFree marks a free slot
    int32_t id;
  };
  void rehash(size_t slot_count);

  std::vector<Slot> slots_;
  std::string keys_;
  size_t size_ = 0;
};

// Words recently merged by one BPE model on this thread, with their ids. Bounded: when full it starts over.
class WordCache {
 public:
  // This thread's cache, emptied if it last served another model.
  static WordCache& of_model(uint64_t model_id);

  // Appends the cached ids of `word` to out; false when it is not cached.
  bool find(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const;
  void insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t count);

 private:
  static constexpr uint32_t kFree = ~uint32_t(0);
  static constexpr size_t kMaxWords = size_t(1) << 16;
  static constexpr size_t kInitialSlots = 1024;
  struct Slot {
    uint64_t hash;
    uint32_t key_offset, key_length;  // key_length kFree marks a free slot
    uint32_t ids_offset, ids_count;
  };
  void clear();
  void grow();

  uint64_t model_id_ = 0;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t size_ = 0;
};

}  // namespace zaya::tok
