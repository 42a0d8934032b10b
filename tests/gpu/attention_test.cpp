// The GPU backend's attention (forward, backward, decode) against the CPU backend.
//
// Tolerances. f32: the two backends differ only in the order of their f32 sums (the GPU's running max
// rescales partial sums; the CPU normalises first), so outputs agree to a few f32 ulps of the terms summed:
// 2e-5 absolute / 1e-4 relative for values of order 1 summed over at most a hundred keys and 128
// dimensions (the largest error seen is 2e-6).
// bf16 (on the GPU, products on the matrix units): both backends read the same bf16-rounded q, k, v and dO
// and sum in f32, so the scores, the log-sum-exp and every row statistic keep the f32 bound.
//   Forward output: the probabilities are rounded at different points (the GPU rounds exp(s - running
//   max), the CPU the normalised p), each within half a bf16 ulp (2^-9) of the exact value, so each term
//   p_j v_j may differ by 2^-8 of itself, and o by 2^-8 sum_j p_j |v_j| <= 2^-8 max |v|.
//   Backward: P and dS are rounded at the CPU's points, but from f32 values summed in another order, so a
//   value within an f32 ulp of the midpoint of two bf16 neighbours may round the other way, moving its term
//   by one bf16 ulp, 2^-8 of itself: a term of dV is P dO, at most max |dO| (P <= 1); one of dQ is
//   scale dS k and one of dK scale dS q, with |dS| = P |dP - D| <= max |dO.v - dO.o| (computed below).
//   Flips are rare (at most 0.5% of the dV outputs here, none for dQ and dK), so besides that bound at most
//   2% of the outputs may be off by more than the f32 bound: a missed rounding would put nearly all there.
// Window 1 pins the rounding points exactly: each row sees only its own key, p = 1 on both sides, so o is
// bf16(v) and dV is bf16(dO), bit for bit.

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/precision.h"
#include "gpu/gpu_test_util.h"

namespace zaya::test {
namespace {

using Attention = GpuOpsTest;

constexpr double kF32Abs = 2e-5, kF32Rel = 1e-4;
constexpr double kBf16Ulp = 1.0 / 256;  // 2^-8: one unit in the last place of bf16's 8-bit significand

double largest(const std::vector<float>& x) {
  double max = 0;
  for (float value : x) {
    if (std::isfinite(value)) max = std::max(max, double(std::abs(value)));
  }
  return max;
}

// The largest |dP - D| = |dO_i . v_j - dO_i . o_i| over the queries i, their heads and the keys j <= i: a
// bound on |dS| (P <= 1). dO and o [B, S, H, D], v [B, S, KV, D].
double largest_score_gradient(const std::vector<float>& dout, const std::vector<float>& o,
                              const std::vector<float>& v, const AttentionShape& s) {
  double max = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t i = 0; i < s.seq; ++i) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const float* d_o = dout.data() + ((b * s.seq + i) * s.heads + h) * s.head_dim;
        const float* o_i = o.data() + ((b * s.seq + i) * s.heads + h) * s.head_dim;
        double row_dot = 0;
        for (int64_t d = 0; d < s.head_dim; ++d) row_dot += double(d_o[d]) * o_i[d];
        for (int64_t j = 0; j <= i; ++j) {
          const float* v_j =
              v.data() + ((b * s.seq + j) * s.kv_heads + h / (s.heads / s.kv_heads)) * s.head_dim;
          double dot = 0;
          for (int64_t d = 0; d < s.head_dim; ++d) dot += double(d_o[d]) * v_j[d];
          max = std::max(max, std::abs(dot - row_dot));
        }
      }
    }
  }
  return max;
}

// close(), and (bf16 backward) at most 2% of the elements off by more than the f32 bound.
testing::AssertionResult close_but_rare_flips(const std::vector<float>& gpu, const std::vector<float>& cpu,
                                              double flip) {
  testing::AssertionResult within = close(gpu, cpu, kF32Abs + flip, kF32Rel);
  if (!within) return within;
  size_t beyond = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    beyond += std::abs(double(gpu[i]) - cpu[i]) > kF32Abs + kF32Rel * std::abs(cpu[i]);
  }
  if (beyond * 50 > gpu.size()) {
    return testing::AssertionFailure() << beyond << " of " << gpu.size() << " elements beyond the f32 bound";
  }
  return within << ", " << beyond << " beyond the f32 bound";
}

struct Case {
  int64_t batch, seq, heads, kv_heads, head_dim, window;
  Precision precision;
  bool masked;  // key padding: sequence 0 drops a few scattered keys, sequence 1 its first 6 (rows that see
                // no key at all, with a window or not)
};

// Runs forward and backward on both backends and compares every output. The backward of both reads the
// CPU's o and lse, so that it is compared on its own.
void check(Ops& gpu, Ops& cpu, const Case& c) {
  const AttentionShape shape{c.batch, c.seq, c.heads, c.kv_heads, c.head_dim, c.window};
  const size_t q_size = size_t(c.batch * c.seq * c.heads * c.head_dim),
               kv_size = size_t(c.batch * c.seq * c.kv_heads * c.head_dim),
               lse_size = size_t(c.batch * c.heads * c.seq);
  const float scale = 1.0f / std::sqrt(float(c.head_dim));
  // q scaled up so that the scores spread over a few units: a softmax far from uniform.
  const auto q = random_values(q_size, 101, 3.0f), k = random_values(kv_size, 102),
             v = random_values(kv_size, 103), dout = random_values(q_size, 104);
  std::vector<float> mask(size_t(c.batch * c.seq), 1.0f);
  for (int64_t j = 3; j < c.seq; j += 5) mask[size_t(j)] = 0.0f;
  for (int64_t j = 0; c.batch > 1 && j < std::min<int64_t>(6, c.seq); ++j) mask[size_t(c.seq + j)] = 0.0f;
  const float* cpu_mask = c.masked ? mask.data() : nullptr;

  std::vector<float> o(q_size), lse(lse_size);
  cpu.attention_forward(c.precision, q.data(), k.data(), v.data(), cpu_mask, shape, scale, o.data(),
                        lse.data());
  DeviceArray<float> gq(q), gk(k), gv(v), gmask(mask), gdout(dout), go(q_size), glse(lse_size);
  float* gpu_mask = c.masked ? gmask.data() : nullptr;
  gpu.attention_forward(c.precision, gq.data(), gk.data(), gv.data(), gpu_mask, shape, scale, go.data(),
                        glse.data());
  const bool bf16 = c.precision == Precision::BF16;
  EXPECT_TRUE(close(glse.host(), lse, kF32Abs, kF32Rel)) << "lse";
  const bool pinned = bf16 && c.window == 1;  // p = 1: o = bf16(v) and dV = bf16(dO) on both sides
  if (pinned) {
    EXPECT_TRUE(close(go.host(), o, 0, 0)) << "o";
  } else {
    EXPECT_TRUE(close(go.host(), o, kF32Abs + (bf16 ? kBf16Ulp * largest(v) : 0), kF32Rel)) << "o";
  }
  if (c.masked && c.batch > 1) {  // row 0 of sequence 1 sees no key: lse -inf, output 0
    EXPECT_EQ(lse[size_t(c.heads * c.seq)], -INFINITY);
    EXPECT_EQ(glse.host()[size_t(c.heads * c.seq)], -INFINITY);
  }

  std::vector<float> dq(q_size), dk(kv_size), dv(kv_size);
  cpu.attention_backward(c.precision, q.data(), k.data(), v.data(), cpu_mask, o.data(), lse.data(),
                         dout.data(), shape, scale, dq.data(), dk.data(), dv.data());
  DeviceArray<float> gcpu_o(o), gcpu_lse(lse), gdq(q_size), gdk(kv_size), gdv(kv_size);
  gpu.attention_backward(c.precision, gq.data(), gk.data(), gv.data(), gpu_mask, gcpu_o.data(),
                         gcpu_lse.data(), gdout.data(), shape, scale, gdq.data(), gdk.data(), gdv.data());
  if (!bf16) {
    EXPECT_TRUE(close(gdq.host(), dq, kF32Abs, kF32Rel)) << "dq";
    EXPECT_TRUE(close(gdk.host(), dk, kF32Abs, kF32Rel)) << "dk";
    EXPECT_TRUE(close(gdv.host(), dv, kF32Abs, kF32Rel)) << "dv";
  } else {
    const double ds = largest_score_gradient(dout, o, v, shape);
    EXPECT_TRUE(close_but_rare_flips(gdq.host(), dq, kBf16Ulp * scale * ds * largest(k))) << "dq";
    EXPECT_TRUE(close_but_rare_flips(gdk.host(), dk, kBf16Ulp * scale * ds * largest(q))) << "dk";
    EXPECT_TRUE(pinned ? close(gdv.host(), dv, 0, 0)
                       : close_but_rare_flips(gdv.host(), dv, kBf16Ulp * largest(dout)))
        << "dv";
  }
}

// Heads 4 over 2 KV heads (GQA), seq 37: more than one key tile, and not a multiple of any tile.
TEST_F(Attention, CausalF32) {
  check(gpu(), cpu(), {2, 37, 4, 2, 32, 0, Precision::F32, true});
}
TEST_F(Attention, CausalBf16) {
  check(gpu(), cpu(), {2, 37, 4, 2, 32, 0, Precision::BF16, true});
}
TEST_F(Attention, WindowF32) {
  check(gpu(), cpu(), {2, 37, 4, 2, 32, 5, Precision::F32, true});
}
TEST_F(Attention, WindowBf16) {
  check(gpu(), cpu(), {2, 37, 4, 2, 32, 5, Precision::BF16, true});
}

// Each row sees only its own key: the bf16 rounding points of o and dV pinned exactly.
TEST_F(Attention, Window1Bf16) {
  check(gpu(), cpu(), {2, 37, 4, 2, 32, 1, Precision::BF16, true});
}

// Several query and key tiles (of 32 and 64 rows for this head_dim), so whole key tiles are skipped: above
// the diagonal, and before the window (window 20: query tile 64 starts at key 45). Window 2 puts the first
// key of query tile 64 (key 63) last in its key tile and the last query of key tile 0 (query 32) first in
// its query tile: the tile ranges' edges. No key mask; a head_dim that is not a multiple of 16.
TEST_F(Attention, ManyTilesF32) {
  for (int64_t window : {0, 20, 2}) check(gpu(), cpu(), {1, 100, 2, 1, 40, window, Precision::F32, false});
}

// bf16 runs on the matrix units' kernels, with tiles of their own (64 rows; at head_dim 128 dQ's 32 and dK
// dV's 64 keys against 16 queries at a time, in opted-in dynamic shared memory): several of them, skipped
// ones, the tile ranges' edges as above, a head_dim that is not a multiple of 16.
TEST_F(Attention, ManyTilesBf16) {
  for (int64_t window : {0, 20, 2}) {
    check(gpu(), cpu(), {1, 100, 2, 1, 40, window, Precision::BF16, false});
    check(gpu(), cpu(), {1, 100, 4, 2, 128, window, Precision::BF16, window == 0});
  }
}

// The widest heads (their own tile shapes).
TEST_F(Attention, HeadDim128) {
  check(gpu(), cpu(), {2, 37, 2, 1, 128, 0, Precision::BF16, true});
  check(gpu(), cpu(), {1, 37, 2, 2, 128, 9, Precision::F32, false});
}

// No atomics: the same inputs give the same bits, on either set of kernels.
TEST_F(Attention, BackwardRepeatsBitForBit) {
  const AttentionShape shape{1, 37, 4, 1, 32, 0};
  const size_t q_size = size_t(37 * 4 * 32), kv_size = size_t(37 * 32);
  DeviceArray<float> q(random_values(q_size, 1)), k(random_values(kv_size, 2)), v(random_values(kv_size, 3)),
      dout(random_values(q_size, 4)), o(q_size), lse(size_t(4 * 37));
  for (Precision precision : {Precision::F32, Precision::BF16}) {
    gpu().attention_forward(precision, q.data(), k.data(), v.data(), nullptr, shape, 0.2f, o.data(),
                            lse.data());
    std::vector<float> first[3];
    for (int run = 0; run < 2; ++run) {
      DeviceArray<float> dq(q_size), dk(kv_size), dv(kv_size);
      gpu().attention_backward(precision, q.data(), k.data(), v.data(), nullptr, o.data(), lse.data(),
                               dout.data(), shape, 0.2f, dq.data(), dk.data(), dv.data());
      if (run == 0) {
        first[0] = dq.host(), first[1] = dk.host(), first[2] = dv.host();
      } else {
        EXPECT_TRUE(close(dq.host(), first[0], 0, 0)) << precision_name(precision);
        EXPECT_TRUE(close(dk.host(), first[1], 0, 0)) << precision_name(precision);
        EXPECT_TRUE(close(dv.host(), first[2], 0, 0)) << precision_name(precision);
      }
    }
  }
}

TEST_F(Attention, RejectsHeadsWiderThan128) {
  const AttentionShape shape{1, 4, 1, 1, 160, 0};
  DeviceArray<float> x(size_t(4 * 160)), lse(4);
  EXPECT_THROW(gpu().attention_forward(Precision::F32, x.data(), x.data(), x.data(), nullptr, shape, 1.0f,
                                       x.data(), lse.data()),
               Error);
}

// Decode: f32 throughout, so only the sum order differs. Three sequences with caches of different lengths
// (one position only in the last).
TEST_F(Attention, Decode) {
  struct DecodeCase {
    int64_t heads, kv_heads, head_dim, window, length;
  };
  for (const DecodeCase c : {DecodeCase{4, 2, 32, 0, 37}, DecodeCase{4, 2, 32, 10, 37},
                             DecodeCase{2, 1, 128, 0, 300}, DecodeCase{3, 3, 40, 50, 7},
                             DecodeCase{2, 1, 100, 0, 9}}) {  // the CPU's 64-wide chunk and 8-wide tails
    const int64_t B = 3, cache = c.length * c.kv_heads * c.head_dim;
    const AttentionShape shape{B, 1, c.heads, c.kv_heads, c.head_dim, c.window};
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    const std::vector<int64_t> lengths = {c.length, c.length / 2, 1};
    const auto q = random_values(size_t(B * c.heads * c.head_dim), 201, 3.0f);
    const auto keys = random_values(size_t(B * cache), 202);
    const auto values = random_values(size_t(B * cache), 203);
    std::vector<float> out(q.size());
    DeviceArray<float> gq(q), gkeys(keys), gvalues(values), gout(q.size());
    std::vector<const float*> cpu_keys, cpu_values, gpu_keys, gpu_values;  // [B]
    for (int64_t b = 0; b < B; ++b) {
      cpu_keys.push_back(keys.data() + b * cache);
      cpu_values.push_back(values.data() + b * cache);
      gpu_keys.push_back(gkeys.data() + b * cache);
      gpu_values.push_back(gvalues.data() + b * cache);
    }
    cpu().attention_decode(q.data(), cpu_keys.data(), cpu_values.data(), lengths.data(), shape, scale,
                           out.data());
    gpu().attention_decode(gq.data(), gpu_keys.data(), gpu_values.data(), lengths.data(), shape, scale,
                           gout.data());
    EXPECT_TRUE(close(gout.host(), out, kF32Abs, kF32Rel))
        << "head_dim " << c.head_dim << ", window " << c.window;
  }
}

}  // namespace
}  // namespace zaya::test
