#pragma once
// A map that holds at most `capacity` entries, dropping the least recently used one to make room: for
// things made once per shape (cuBLASLt's plans), where a model's shapes are few but some of them (an expert's
// row count) take a new value every step.

#include <cstddef>
#include <iterator>
#include <list>
#include <map>
#include <utility>

namespace zaya {

template <class Key, class Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The value for `key`, made by make() when absent. When the cache is full, the least recently used
  // value is first handed to drop() (to free what it holds) and removed.
  template <class Make, class Drop>
  Value& get(const Key& key, Make make, Drop drop) {
    auto found = index_.find(key);
    if (found != index_.end()) {
      entries_.splice(entries_.begin(), entries_, found->second);  // now the most recently used
      return found->second->second;
    }
    if (entries_.size() == capacity_) {
      drop(entries_.back().second);
      index_.erase(entries_.back().first);
      entries_.pop_back();
    }
    entries_.emplace_front(key, make());
    index_.emplace(key, entries_.begin());
    return entries_.front().second;
  }

  // Hands every value to drop() and empties the cache.
  template <class Drop>
  void clear(Drop drop) {
    for (auto& entry : entries_) drop(entry.second);
    entries_.clear();
    index_.clear();
  }

  size_t size() const { return entries_.size(); }

 private:
  using Entries = std::list<std::pair<Key, Value>>;  // most recently used first
  size_t capacity_;
  Entries entries_;
  std::map<Key, typename Entries::iterator> index_;
};

}  // namespace zaya
