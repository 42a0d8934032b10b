#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "train/tensorboard.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

TEST(TensorBoard, Crc32cMatchesTheCastagnoliCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

uint32_t masked(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Every record is length | masked CRC of the length | payload | masked CRC of the payload, the first
// payload holding the file version; the scalar's tag and value are in the second.
TEST(TensorBoard, WritesWellFramedRecords) {
  test::TempDir dir;
  std::string path;
  {
    TensorBoardWriter writer(dir.file("tb"));
    writer.scalar("train/loss", 7, 2.5);
    writer.bars("routing/layer_0/load", 7, {10, 20, 30});
    path = writer.path();
  }
  const std::string bytes = test::read_bytes(path);
  size_t at = 0;
  std::vector<std::string> payloads;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    uint64_t length;
    uint32_t length_crc, data_crc;
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(length_crc, masked(bytes.data() + at, 8));
    ASSERT_LE(at + 12 + length + 4, bytes.size());
    const std::string payload = bytes.substr(at + 12, length);
    std::memcpy(&data_crc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, masked(payload.data(), payload.size()));
    payloads.push_back(payload);
    at += 12 + length + 4;
  }
  ASSERT_EQ(payloads.size(), 3u);
  EXPECT_NE(payloads[0].find("brain.Event:2"), std::string::npos);
  EXPECT_NE(payloads[1].find("train/loss"), std::string::npos);
  const float value = 2.5f;
  EXPECT_NE(payloads[1].find(std::string(reinterpret_cast<const char*>(&value), 4)), std::string::npos);
  EXPECT_NE(payloads[2].find("routing/layer_0/load"), std::string::npos);
}

}  // namespace
}  // namespace zaya
