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

// A pair of uniform words as a normal pair's polar form (Box-Muller): each Philox block gives two pairs, and
// each pair two normals, the cosine for an even index and the sine for an odd one. Index i uses pair i / 2.
struct Polar {
  double radius, angle;
};

Polar box_muller(const std::array<uint32_t, 4>& words, int pair) {
  const double u1 = (double(words[2 * pair]) + 1.0) * 0x1.0p-32;  // (0, 1]: log stays finite
  const double u2 = double(words[2 * pair + 1]) * 0x1.0p-32;
  return {std::sqrt(-2.0 * std::log(u1)), 2.0 * std::numbers::pi * u2};
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

float RandomStream::normal(uint64_t index) const {
  const Polar p = box_muller(block(index / 4), int(index % 4) / 2);
  return float(index % 2 ? p.radius * std::sin(p.angle) : p.radius * std::cos(p.angle));
}

void RandomStream::normals(uint64_t first, int64_t count, float* out) const {
  uint64_t index = first;
  const uint64_t end = first + uint64_t(count);
  for (; index < end && index % 4 != 0; ++index) *out++ = normal(index);
  for (; index + 4 <= end; index += 4) {
    const std::array<uint32_t, 4> words = block(index / 4);
    for (int pair = 0; pair < 2; ++pair) {
      const Polar p = box_muller(words, pair);
      *out++ = float(p.radius * std::cos(p.angle));
      *out++ = float(p.radius * std::sin(p.angle));
    }
  }
  for (; index < end; ++index) *out++ = normal(index);
}

}  // namespace zaya
