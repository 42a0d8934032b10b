// LruCache: values made once per key, at most `capacity` kept, the least recently used dropped first.

#include "core/lru_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace zaya {
namespace {

TEST(LruCache, MakesEachValueOnceAndDropsTheLeastRecentlyUsed) {
  LruCache<int, std::string> cache(2);
  int made = 0;
  std::vector<std::string> dropped;
  const auto get = [&](int key) -> std::string& {
    return cache.get(
        key,
        [&] {
          ++made;
          return std::to_string(key);
        },
        [&](std::string& value) { dropped.push_back(value); });
  };
  EXPECT_EQ(get(1), "1");
  EXPECT_EQ(get(2), "2");
  EXPECT_EQ(get(1), "1");  // kept: 1 is now the most recently used
  EXPECT_EQ(made, 2);
  EXPECT_EQ(get(3), "3");  // full: 2, the least recently used, goes
  EXPECT_EQ(dropped, std::vector<std::string>{"2"});
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(get(1), "1");
  EXPECT_EQ(made, 3);
  EXPECT_EQ(get(2), "2");  // made again; 3 goes
  EXPECT_EQ(dropped, (std::vector<std::string>{"2", "3"}));
  cache.clear([&](std::string& value) { dropped.push_back(value); });
  EXPECT_EQ(dropped, (std::vector<std::string>{"2", "3", "2", "1"}));
  EXPECT_EQ(cache.size(), 0u);
}

// A row count that changes every step (an expert's) keeps the cache at its bound, not growing with steps.
TEST(LruCache, StaysWithinItsCapacityOverManyKeys) {
  LruCache<int, int> cache(8);
  int live = 0;
  for (int step = 0; step < 10000; ++step) {
    cache.get(
        step % 977,
        [&] {
          ++live;
          return step;
        },
        [&](int&) { --live; });
    ASSERT_LE(cache.size(), 8u);
  }
  EXPECT_EQ(live, 8);
}

}  // namespace
}  // namespace zaya
