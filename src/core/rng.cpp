#include "core/rng.h"

#include <cmath>
#include <numbers>

namespace zaya {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

void philox_round(std::array<uint32_t, 4>& ctr, const std::array<uint32_t, 2>& key) {
  const uint64_t p0 = uint64_t(kMul0) * ctr[0];
  const uint64_t p1 = uint64_t(kMul1) * ctr[2];
  ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1],
         uint32_t(p0)};
}

}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    if (round) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    philox_round(counter, key);
  }
  return counter;
}

RandomStream::RandomStream(uint64_t seed, RngPurpose purpose, uint64_t substream)
    : key_{uint32_t(seed), uint32_t(seed >> 32)},
      stream_((uint64_t(static_cast<uint32_t>(purpose)) << 40) ^ substream) {}

std::array<uint32_t, 4> RandomStream::block(uint64_t block_index) const {
  return philox4x32(
      {uint32_t(block_index), uint32_t(block_index >> 32), uint32_t(stream_), uint32_t(stream_ >> 32)}, key_);
}

uint32_t RandomStream::bits(uint64_t index) const {
  return block(index / 4)[index % 4];
}

float RandomStream::uniform(uint64_t index) const {
  return float(bits(index) >> 8) * 0x1.0p-24f;
}

double RandomStream::uniform_double(uint64_t index) const {
  const auto words = block(index / 2);
  const uint64_t hi = words[(index % 2) * 2], lo = words[(index % 2) * 2 + 1];
  return double(((hi << 32) | lo) >> 11) * 0x1.0p-53;
}

// Each Philox block gives two (u1, u2) pairs; each pair gives two normals. Index i uses pair i/2.
float RandomStream::normal(uint64_t index) const {
  const auto words = block(index / 4);
  const int pair = int(index % 4) / 2;
  const double u1 = (double(words[2 * pair]) + 1.0) * 0x1.0p-32;  // (0, 1]: log stays finite
  const double u2 = double(words[2 * pair + 1]) * 0x1.0p-32;
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  return float(index % 2 ? radius * std::sin(angle) : radius * std::cos(angle));
}

}  // namespace zaya
