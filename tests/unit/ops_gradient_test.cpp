// Every backward op of the CPU backend against central finite differences of its forward op. Each check
// takes L = sum(r * f(x)) with random r, so one scalar carries every output, and compares dL/dx from the
// backward op with (L(x + h) - L(x - h)) / 2h on every input coordinate (float32; the tolerance is loose
// enough for rounding and tight enough to catch a wrong sign, a missing term or a wrong index).

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "core/dtype.h"
#include "core/rng.h"

namespace zaya {
namespace {

using Vec = std::vector<float>;

Vec random_vec(size_t n, uint64_t stream, float scale = 1.0f, float offset = 0.0f) {
  const RandomStream rng(77, RngPurpose::Test, stream);
  Vec v(n);
  for (size_t i = 0; i < n; ++i) v[i] = offset + scale * rng.normal(i);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// Compares `analytic` with finite differences of `loss` with respect to every element of `x`.
void expect_gradient(const char* what, Vec& x, const Vec& analytic, const std::function<double()>& loss,
                     double h = 1e-2, double tolerance = 2e-3) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + float(h);
    const double plus = loss();
    x[i] = saved - float(h);
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2 * h);
    diff += (numeric - analytic[i]) * (numeric - analytic[i]);
    norm += numeric * numeric;
  }
  ASSERT_GT(norm, 0) << what << ": the loss does not depend on this input";
  EXPECT_LE(std::sqrt(diff / norm), tolerance) << what;
}

Ops& ops() {
  return cpu_ops();
}

TEST(OpsGradient, RmsNorm) {
  const int64_t rows = 5, n = 7;
  Vec x = random_vec(rows * n, 1), w = random_vec(n, 2, 0.3f, 1.0f), r = random_vec(rows * n, 3);
  Vec y(rows * n), rstd(rows), dx(rows * n), dw(n, 0.0f);
  ops().rmsnorm_forward(x.data(), w.data(), rows, n, 1e-5f, y.data(), rstd.data());
  ops().rmsnorm_backward(x.data(), w.data(), rstd.data(), r.data(), rows, n, dx.data(), false, dw.data());
  auto loss = [&] {
    ops().rmsnorm_forward(x.data(), w.data(), rows, n, 1e-5f, y.data(), rstd.data());
    return dot(y, r);
  };
  expect_gradient("x", x, dx, loss);
  expect_gradient("weight", w, dw, loss);
  // accumulate adds to what is there.
  Vec acc(rows * n, 1.0f);
  ops().rmsnorm_backward(x.data(), w.data(), rstd.data(), r.data(), rows, n, acc.data(), true, dw.data());
  for (size_t i = 0; i < acc.size(); ++i) EXPECT_NEAR(acc[i], dx[i] + 1.0f, 1e-5);
}

TEST(OpsGradient, ResidualScale) {
  const int64_t rows = 4, n = 6;
  Vec h = random_vec(rows * n, 1), res = random_vec(rows * n, 2), hb = random_vec(n, 3),
      hs = random_vec(n, 4), rb = random_vec(n, 5), rs = random_vec(n, 6), r = random_vec(rows * n, 7);
  Vec out(rows * n), dh(rows * n), dr(rows * n), dhb(n, 0.f), dhs(n, 0.f), drb(n, 0.f), drs(n, 0.f);
  ops().residual_scale_backward(h.data(), res.data(), hb.data(), hs.data(), rb.data(), rs.data(), r.data(),
                                rows, n, dh.data(), dr.data(), dhb.data(), dhs.data(), drb.data(),
                                drs.data());
  auto loss = [&] {
    ops().residual_scale_forward(h.data(), res.data(), hb.data(), hs.data(), rb.data(), rs.data(), rows, n,
                                 out.data());
    return dot(out, r);
  };
  expect_gradient("h", h, dh, loss);
  expect_gradient("r", res, dr, loss);
  expect_gradient("h_bias", hb, dhb, loss);
  expect_gradient("h_scale", hs, dhs, loss);
  expect_gradient("r_bias", rb, drb, loss);
  expect_gradient("r_scale", rs, drs, loss);
}

TEST(OpsGradient, EmbeddingSkipsThePaddingRow) {
  const int64_t vocab = 6, hidden = 4, tokens = 7;
  const std::vector<int32_t> ids = {1, 3, 0, 3, 5, 0, 2};
  Vec table = random_vec(vocab * hidden, 1), bias = random_vec(hidden, 2), scale = random_vec(hidden, 3),
      r = random_vec(tokens * hidden, 4), out(tokens * hidden);
  Vec dtable(vocab * hidden, 0.f), dbias(hidden, 0.f), dscale(hidden, 0.f);
  ops().embedding_backward(ids.data(), tokens, table.data(), hidden, bias.data(), scale.data(), r.data(), 0,
                           dtable.data(), dbias.data(), dscale.data());
  auto loss = [&] {
    ops().embedding_forward(ids.data(), tokens, table.data(), hidden, bias.data(), scale.data(), out.data());
    return dot(out, r);
  };
  expect_gradient("bias", bias, dbias, loss);
  expect_gradient("scale", scale, dscale, loss);
  // nn.Embedding(padding_idx=0): row 0 gets no gradient; every other row gets exactly its share.
  for (int64_t j = 0; j < hidden; ++j) {
    EXPECT_EQ(dtable[j], 0.0f);
    float want = 0;
    for (int64_t t = 0; t < tokens; ++t) want += ids[t] == 3 ? r[t * hidden + j] * scale[j] : 0.0f;
    EXPECT_NEAR(dtable[3 * hidden + j], want, 1e-5);
  }
}

TEST(OpsGradient, GeluAndSwiglu) {
  const int64_t rows = 3, n = 5;
  Vec x = random_vec(rows * n, 1, 2.0f), r = random_vec(rows * n, 2), y(rows * n), dx(rows * n);
  ops().gelu_backward(x.data(), r.data(), rows * n, dx.data());
  expect_gradient("gelu", x, dx, [&] {
    ops().gelu_forward(x.data(), rows * n, y.data());
    return dot(y, r);
  });

  Vec gate_up = random_vec(rows * 2 * n, 3, 2.0f), dgu(rows * 2 * n);
  ops().swiglu_backward(gate_up.data(), r.data(), rows, n, dgu.data());
  expect_gradient("swiglu", gate_up, dgu, [&] {
    ops().swiglu_forward(gate_up.data(), rows, n, y.data());
    return dot(y, r);
  });
}

TEST(OpsGradient, AddScaled) {
  const int64_t rows = 4, n = 3;
  Vec x = random_vec(rows * n, 1), s = random_vec(n, 2), r = random_vec(rows * n, 3);
  Vec dx(rows * n), ds(n, 0.f), y(rows * n);
  ops().add_scaled_backward(x.data(), s.data(), r.data(), rows, n, dx.data(), ds.data());
  auto loss = [&] {
    std::fill(y.begin(), y.end(), 0.5f);
    ops().add_scaled(x.data(), s.data(), rows, n, y.data());
    return dot(y, r);
  };
  expect_gradient("x", x, dx, loss);
  expect_gradient("scale", s, ds, loss);
}

TEST(OpsGradient, QkMean) {
  const AttentionShape shape{1, 3, 4, 2, 3, 0};
  const int64_t tokens = 3, ld = (4 + 2) * 3 + 2;  // a wider row stride than needed
  Vec qk = random_vec(tokens * ld, 1), rq = random_vec(tokens * 12, 2), rk = random_vec(tokens * 6, 3);
  Vec q_res(tokens * 12), k_res(tokens * 6), dqk(tokens * ld, 0.f);
  ops().qk_mean_backward(rq.data(), rk.data(), tokens, ld, shape, dqk.data());
  expect_gradient(
      "qk", qk, dqk,
      [&] {
        ops().qk_mean_forward(qk.data(), tokens, ld, shape, q_res.data(), k_res.data());
        return dot(q_res, rq) + dot(k_res, rk);
      },
      1e-2, 1e-3);
}

TEST(OpsGradient, CcaConvolutions) {
  for (auto [k0, k1] : {std::pair<int64_t, int64_t>{2, 2}, {3, 2}, {2, 3}, {1, 1}}) {
    const AttentionShape shape{2, 5, 2, 1, 3, 0};
    const int64_t C = 9, B = 2, S = 5, dw_len = S + k1 - 1;
    Vec x = random_vec(B * S * C, 1), dw_w = random_vec(C * k0, 2), dw_b = random_vec(C, 3),
        g_w = random_vec(C * 3 * k1, 4), g_b = random_vec(C, 5), r = random_vec(B * S * C, 6);
    Vec dw(B * dw_len * C), out(B * S * C), scratch(size_t(ops().cca_conv_scratch(shape, k0, k1)));
    Vec dx(B * S * C), d_dw_w(C * k0, 0.f), d_dw_b(C, 0.f), d_g_w(C * 3 * k1, 0.f), d_g_b(C, 0.f);
    auto loss = [&] {
      ops().cca_conv_forward(Precision::F32, x.data(), shape, k0, k1, dw_w.data(), dw_b.data(), g_w.data(),
                             g_b.data(), dw.data(), out.data(), scratch.data());
      return dot(out, r);
    };
    loss();
    ops().cca_conv_backward(Precision::F32, x.data(), dw.data(), r.data(), shape, k0, k1, dw_w.data(),
                            g_w.data(), dx.data(), d_dw_w.data(), d_dw_b.data(), d_g_w.data(), d_g_b.data(),
                            scratch.data());
    SCOPED_TRACE(testing::Message() << "k0 " << k0 << " k1 " << k1);
    expect_gradient("x", x, dx, loss);
    expect_gradient("depthwise weight", dw_w, d_dw_w, loss);
    expect_gradient("depthwise bias", dw_b, d_dw_b, loss);
    expect_gradient("grouped weight", g_w, d_g_w, loss);
    expect_gradient("grouped bias", g_b, d_g_b, loss);
  }
}

TEST(OpsGradient, CcaConvolutionIsCausal) {
  const AttentionShape shape{1, 6, 1, 1, 2, 0};
  const int64_t C = 4;
  Vec x = random_vec(6 * C, 1), dw_w = random_vec(C * 2, 2), dw_b = random_vec(C, 3),
      g_w = random_vec(C * 2 * 2, 4), g_b = random_vec(C, 5), dw(7 * C), out(6 * C), out2(6 * C),
      scratch(size_t(ops().cca_conv_scratch(shape, 2, 2)));
  ops().cca_conv_forward(Precision::F32, x.data(), shape, 2, 2, dw_w.data(), dw_b.data(), g_w.data(),
                         g_b.data(), dw.data(), out.data(), scratch.data());
  for (int64_t c = 0; c < C; ++c) x[4 * C + c] += 3.0f;  // change position 4
  ops().cca_conv_forward(Precision::F32, x.data(), shape, 2, 2, dw_w.data(), dw_b.data(), g_w.data(),
                         g_b.data(), dw.data(), out2.data(), scratch.data());
  for (int64_t i = 0; i < 4 * C; ++i) EXPECT_EQ(out[i], out2[i]) << "position " << i / C << " saw the future";
  EXPECT_NE(out[4 * C], out2[4 * C]);
}

// Decoding's convolution: each position's output from a window of its latest inputs (zeros before the first),
// all positions of a sequence as one batch of windows, equals the full pass's output there. Head sizes 3 and
// 9 with 7 and 11 positions: dot products shorter than a vector and longer with a remainder, one batch of
// windows and more than the 8 that share a weight row's read.
TEST(OpsGradient, CcaConvolutionDecodeIsTheFullPassAtEachPosition) {
  for (const auto& [k0, k1, d, S] :
       {std::array<int64_t, 4>{2, 2, 3, 7}, {3, 2, 3, 7}, {4, 3, 3, 7}, {2, 2, 9, 11}, {4, 3, 9, 11}}) {
    const int64_t C = (2 + 1) * d, rows = (k0 - 1) + (k1 - 1) + 1;
    const AttentionShape full{1, S, 2, 1, d, 0}, windows_shape{S, rows, 2, 1, d, 0};
    Vec x = random_vec(S * C, 1), dw_w = random_vec(C * k0, 2), dw_b = random_vec(C, 3),
        g_w = random_vec(C * d * k1, 4), g_b = random_vec(C, 5), dw((S + k1 - 1) * C), out(S * C),
        scratch(size_t(ops().cca_conv_scratch(full, k0, k1)));
    ops().cca_conv_forward(Precision::F32, x.data(), full, k0, k1, dw_w.data(), dw_b.data(), g_w.data(),
                           g_b.data(), dw.data(), out.data(), scratch.data());
    Vec windows(S * rows * C, 0.0f), decoded(S * C);  // window t ends at position t
    for (int64_t t = 0; t < S; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t position = t - (rows - 1) + r;
        if (position >= 0) std::copy_n(x.begin() + position * C, C, windows.begin() + (t * rows + r) * C);
      }
    }
    ops().cca_conv_decode(windows.data(), windows_shape, k0, k1, dw_w.data(), dw_b.data(), g_w.data(),
                          g_b.data(), decoded.data());
    for (int64_t i = 0; i < S * C; ++i) {
      EXPECT_NEAR(decoded[size_t(i)], out[size_t(i)], 1e-5f * (1.0f + std::abs(out[size_t(i)])))
          << "k0 " << k0 << ", k1 " << k1 << ", d " << d << ", position " << i / C << ", channel " << i % C;
    }
  }
}

TEST(OpsGradient, L2NormWithTemperature) {
  const int64_t rows = 3, heads = 2, d = 4;
  Vec x = random_vec(rows * heads * d, 1), temp = random_vec(heads, 2, 0.3f, 1.0f),
      r = random_vec(rows * heads * d, 3);
  Vec out(rows * heads * d), norms(rows * heads), dx(rows * heads * d), dtemp(heads, 0.f);
  auto loss = [&] {
    ops().l2norm_forward(x.data(), rows, heads, d, temp.data(), out.data(), norms.data());
    return dot(out, r);
  };
  loss();
  ops().l2norm_backward(x.data(), norms.data(), r.data(), rows, heads, d, temp.data(), dx.data(),
                        dtemp.data());
  expect_gradient("x", x, dx, loss, 1e-3, 5e-3);
  expect_gradient("temp", temp, dtemp, loss);
  // Without temperature every head comes out with norm sqrt(d).
  ops().l2norm_forward(x.data(), rows, heads, d, nullptr, out.data(), norms.data());
  for (int64_t i = 0; i < rows * heads; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < d; ++j) sum += out[i * d + j] * out[i * d + j];
    EXPECT_NEAR(std::sqrt(sum), 2.0, 1e-5);
  }
}

TEST(OpsGradient, RopeInverseIsTheTranspose) {
  const int64_t batch = 2, seq = 3, heads = 2, d = 6, rot = 4;
  Vec cos(seq * rot / 2), sin(seq * rot / 2);
  for (int64_t s = 0; s < seq; ++s) {
    for (int64_t i = 0; i < rot / 2; ++i) {
      cos[s * rot / 2 + i] = std::cos(0.7f * float(s * (i + 1)));
      sin[s * rot / 2 + i] = std::sin(0.7f * float(s * (i + 1)));
    }
  }
  Vec x = random_vec(batch * seq * heads * d, 1), y = random_vec(batch * seq * heads * d, 2);
  Vec rx = x, ty = y;
  ops().rope(rx.data(), batch, seq, heads, d, rot, cos.data(), sin.data(), false);
  ops().rope(ty.data(), batch, seq, heads, d, rot, cos.data(), sin.data(), true);
  EXPECT_NEAR(dot(rx, y), dot(x, ty), 1e-4);  // <R x, y> = <x, R^T y>
  ops().rope(rx.data(), batch, seq, heads, d, rot, cos.data(), sin.data(), true);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(rx[i], x[i], 1e-5);  // and R^T R = I
  for (int64_t h = 0; h < heads; ++h) {  // channels past rotary_dim pass through
    EXPECT_EQ(ty[((1 * seq + 2) * heads + h) * d + 5], y[((1 * seq + 2) * heads + h) * d + 5]);
  }
}

// Groups of 2 query heads in one block of 7 positions, and groups of 8 in blocks of 16 positions (the CPU
// stacks at most 128 rows of a group's heads: 37 positions are blocks of 16, 16 and 5).
TEST(OpsGradient, AttentionWithWindowsAndPadding) {
  struct Case {
    int64_t seq, heads, kv_heads, head_dim;
  };
  for (const Case c : {Case{7, 4, 2, 5}, Case{37, 16, 2, 3}}) {
    for (int64_t window : {int64_t(0), c.seq / 2}) {
      const AttentionShape shape{2, c.seq, c.heads, c.kv_heads, c.head_dim, window};
      const int64_t qn = 2 * c.seq * c.heads * c.head_dim, kn = 2 * c.seq * c.kv_heads * c.head_dim;
      Vec q = random_vec(qn, 1), k = random_vec(kn, 2), v = random_vec(kn, 3), r = random_vec(qn, 4);
      Vec mask(size_t(2 * c.seq), 1.0f);
      mask[1] = mask[size_t(c.seq + c.seq - 1)] = 0;  // padded keys: one early, one last
      Vec o(qn), lse(2 * c.heads * c.seq), dq(qn), dk(kn), dv(kn);
      auto loss = [&] {
        ops().attention_forward(Precision::F32, q.data(), k.data(), v.data(), mask.data(), shape, 0.4f,
                                o.data(), lse.data());
        return dot(o, r);
      };
      loss();
      ops().attention_backward(Precision::F32, q.data(), k.data(), v.data(), mask.data(), o.data(),
                               lse.data(), r.data(), shape, 0.4f, dq.data(), dk.data(), dv.data());
      SCOPED_TRACE(testing::Message() << c.heads << " heads over " << c.kv_heads << ", window " << window);
      expect_gradient("q", q, dq, loss);
      expect_gradient("k", k, dk, loss);
      expect_gradient("v", v, dv, loss);
    }
  }
}

// Attention against a direct evaluation of its definition, including a query row that sees no key.
TEST(OpsGradient, AttentionMatchesTheDefinition) {
  const int64_t S = 6, H = 2, KV = 1, D = 3, window = 2;
  const AttentionShape shape{1, S, H, KV, D, window};
  Vec q = random_vec(S * H * D, 1), k = random_vec(S * KV * D, 2), v = random_vec(S * KV * D, 3);
  Vec mask = {1, 1, 1, 0, 0, 1};  // position 4 sees keys 3 and 4: both padded
  Vec o(S * H * D), lse(H * S);
  ops().attention_forward(Precision::F32, q.data(), k.data(), v.data(), mask.data(), shape, 0.5f, o.data(),
                          lse.data());
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> weights(S, 0.0);
      double total = 0;
      for (int64_t j = std::max<int64_t>(0, i - window + 1); j <= i; ++j) {
        if (mask[j] == 0) continue;
        double score = 0;
        for (int64_t c = 0; c < D; ++c) score += 0.5 * q[(i * H + h) * D + c] * k[j * D + c];
        weights[j] = std::exp(score);
        total += weights[j];
      }
      for (int64_t c = 0; c < D; ++c) {
        double want = 0;
        for (int64_t j = 0; j < S; ++j) want += total > 0 ? weights[j] / total * v[j * D + c] : 0.0;
        EXPECT_NEAR(o[(i * H + h) * D + c], want, 1e-5) << "head " << h << " query " << i;
      }
    }
  }
}

// Decoding's attention: each sequence's new position against its own cache is the last row of the full pass
// over that sequence. Group sizes of 4 (heads taken 4 at a time), 3 (2, then 1) and 1, head sizes with and
// without 8-wide tails; caches of 300, 41 and 1 positions; on 1, 2 and 7 threads (with 7, three sequences
// split their keys in up to three ranges, some of them empty, and the ranges are merged).
TEST(OpsGradient, AttentionDecodeIsTheFullPassLastRow) {
  struct Case {
    int64_t heads, kv_heads, head_dim;
  };
  const std::vector<int64_t> lengths = {300, 41, 1};
  const int64_t B = int64_t(lengths.size()), threads_before = omp_get_max_threads();
  for (const Case c : {Case{8, 2, 128}, Case{6, 2, 20}, Case{2, 2, 9}}) {
    for (const int64_t window : {0, 5}) {
      for (const int threads : {1, 2, 7}) {
        omp_set_num_threads(threads);
        const int64_t H = c.heads, KV = c.kv_heads, D = c.head_dim;
        const float scale = 1.0f / std::sqrt(float(D));
        Vec queries(size_t(B * H * D)), decoded(queries.size());  // [B, H, D]
        std::vector<Vec> keys, values;                            // [B][length, KV, D]
        std::vector<const float*> key_caches, value_caches;       // [B]
        for (int64_t b = 0; b < B; ++b) {
          keys.push_back(random_vec(size_t(lengths[b] * KV * D), uint64_t(10 + b)));
          values.push_back(random_vec(size_t(lengths[b] * KV * D), uint64_t(20 + b)));
        }
        for (int64_t b = 0; b < B; ++b) {
          key_caches.push_back(keys[size_t(b)].data());
          value_caches.push_back(values[size_t(b)].data());
        }
        // The full pass over each sequence: its last row's query is the one decoded.
        std::vector<Vec> full;  // [B][length, H, D]
        for (int64_t b = 0; b < B; ++b) {
          const int64_t S = lengths[b];
          const Vec q = random_vec(size_t(S * H * D), uint64_t(30 + b), 2.0f);
          std::copy(q.end() - H * D, q.end(), queries.begin() + b * H * D);
          Vec o(q.size()), lse(size_t(H * S));
          ops().attention_forward(Precision::F32, q.data(), keys[size_t(b)].data(), values[size_t(b)].data(),
                                  nullptr, AttentionShape{1, S, H, KV, D, window}, scale, o.data(),
                                  lse.data());
          full.push_back(o);
        }
        ops().attention_decode(queries.data(), key_caches.data(), value_caches.data(), lengths.data(),
                               AttentionShape{B, 1, H, KV, D, window}, scale, decoded.data());
        for (int64_t b = 0; b < B; ++b) {
          for (int64_t i = 0; i < H * D; ++i) {
            const float want = full[size_t(b)][size_t((lengths[b] - 1) * H * D + i)];
            // f32 sums in another order: a few ulp of the scores, through exp, on outputs of order 1.
            EXPECT_NEAR(decoded[size_t(b * H * D + i)], want, 1e-5f * (1.0f + std::abs(want)))
                << "heads " << H << "/" << KV << " of " << D << ", window " << window << ", " << threads
                << " threads, sequence " << b << ", head " << i / D;
          }
        }
      }
    }
  }
  omp_set_num_threads(int(threads_before));
}

TEST(OpsGradient, RouteTop1ThroughTheGate) {
  const int64_t tokens = 6, routes = 4;
  Vec logits = random_vec(tokens * routes, 1, 2.0f), biases = {0.0f, 0.1f, -0.05f, 0.02f},
      r = random_vec(tokens, 2);
  Vec probs(tokens * routes), gate(tokens), dlogits(tokens * routes), lse(tokens);
  std::vector<int32_t> choice(tokens), first_choice(tokens);
  ops().route_top1(logits.data(), biases.data(), tokens, routes, probs.data(), first_choice.data(),
                   gate.data(), lse.data());
  ops().route_top1_backward(probs.data(), first_choice.data(), r.data(), tokens, routes, dlogits.data());
  expect_gradient(
      "logits", logits, dlogits,
      [&] {
        ops().route_top1(logits.data(), biases.data(), tokens, routes, probs.data(), choice.data(),
                         gate.data(), lse.data());
        EXPECT_EQ(choice, first_choice) << "a finite-difference step flipped a choice";
        return dot(gate, r);
      },
      1e-3, 5e-3);
  for (int64_t t = 0; t < tokens; ++t) {
    if (first_choice[t] == routes - 1) {
      EXPECT_EQ(gate[t], 0.0f);  // the skip route carries no gate
    }
  }
}

// The auxiliary losses: Switch (sum_e c_e p_e, c fixed) and z (lse^2 / 2 * z_coef) through the softmax.
TEST(OpsGradient, RouterAuxiliaryLosses) {
  const int64_t tokens = 5, routes = 4;
  Vec logits = random_vec(tokens * routes, 1, 1.5f), biases(routes, 0.0f), coef = {0.3f, -0.2f, 0.5f, 0.0f};
  Vec probs(tokens * routes), gate(tokens), lse(tokens), dlogits(tokens * routes, 0.0f);
  std::vector<int32_t> choice(tokens);
  const float z_coef = 0.7f;
  ops().route_top1(logits.data(), biases.data(), tokens, routes, probs.data(), choice.data(), gate.data(),
                   lse.data());
  ops().router_aux_backward(probs.data(), lse.data(), tokens, routes, coef.data(), z_coef, dlogits.data());
  expect_gradient(
      "logits", logits, dlogits,
      [&] {
        ops().route_top1(logits.data(), biases.data(), tokens, routes, probs.data(), choice.data(),
                         gate.data(), lse.data());
        double loss = 0;
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t e = 0; e < routes; ++e) loss += coef[e] * probs[t * routes + e];
          loss += 0.5 * z_coef * lse[t] * lse[t];
        }
        return loss;
      },
      1e-3, 5e-3);

  std::vector<int64_t> counts(routes, 0);
  Vec none(routes, 0.0f);
  std::vector<double> prob_sums(routes, 0.0);
  double entropy = 0, z = 0;
  ops().router_statistics(probs.data(), lse.data(), choice.data(), tokens, routes, counts.data(),
                          prob_sums.data(), &entropy, &z);
  int64_t total = 0;
  for (int64_t e = 0; e < routes; ++e) total += counts[e];
  EXPECT_EQ(total, tokens);
  double want_entropy = 0, want_z = 0, mass = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < routes; ++e) {
      const double p = probs[t * routes + e];
      want_entropy -= p * std::log(p);
      mass += p;
    }
    want_z += double(lse[t]) * lse[t];
  }
  EXPECT_NEAR(entropy, want_entropy, 1e-9);
  EXPECT_NEAR(z, want_z, 1e-9);
  EXPECT_NEAR(prob_sums[0] + prob_sums[1] + prob_sums[2] + prob_sums[3], mass, 1e-9);
}

TEST(OpsGradient, GatherScatterAndDotAreAdjoint) {
  const int64_t tokens = 5, n = 3;
  const std::vector<int32_t> order = {3, 0, 4};
  Vec src = random_vec(tokens * n, 1), scale = random_vec(tokens, 2), small = random_vec(3 * n, 3);
  Vec gathered(3 * n), scattered(tokens * n, 0.f), dots(3);
  ops().gather_rows(src.data(), order.data(), scale.data(), 3, n, gathered.data());
  ops().scatter_rows(small.data(), order.data(), scale.data(), 3, n, false, scattered.data());
  EXPECT_NEAR(dot(gathered, small), dot(src, scattered), 1e-5);  // <G x, y> = <x, G^T y>
  ops().gather_dot(src.data(), order.data(), small.data(), 3, n, dots.data());
  for (int64_t i = 0; i < 3; ++i) {
    double want = 0;
    for (int64_t j = 0; j < n; ++j) want += src[order[i] * n + j] * small[i * n + j];
    EXPECT_NEAR(dots[i], want, 1e-5);
  }
}

TEST(OpsGradient, DelayIsAShiftWithItsAdjoint) {
  const int64_t batch = 2, seq = 4, n = 3, ld = 5;
  Vec src = random_vec(batch * seq * n, 1), first = random_vec(n, 2), dst(batch * seq * ld, 0.f);
  ops().delay_forward(src.data(), first.data(), batch, seq, n, dst.data(), ld);
  EXPECT_EQ(dst[(1 * seq + 0) * ld + 2], first[2]);
  EXPECT_EQ(dst[(1 * seq + 3) * ld + 1], src[(1 * seq + 2) * n + 1]);
  Vec up = random_vec(batch * seq * ld, 3), dsrc(batch * seq * n), dfirst(n, 0.f);
  ops().delay_backward(up.data(), ld, batch, seq, n, dsrc.data(), dfirst.data());
  double lhs = 0;
  for (int64_t t = 0; t < batch * seq; ++t) {
    for (int64_t j = 0; j < n; ++j) lhs += double(dst[t * ld + j]) * up[t * ld + j];
  }
  EXPECT_NEAR(lhs, dot(src, dsrc) + dot(first, dfirst), 1e-4);
}

TEST(OpsGradient, CrossEntropy) {
  const int64_t rows = 4, vocab = 6;
  Vec logits = random_vec(rows * vocab, 1, 2.0f), dlogits(rows * vocab);
  const std::vector<int32_t> labels = {2, -100, 5, 0};
  double total = 1.0;  // the loss is added to what is there
  ops().cross_entropy(logits.data(), labels.data(), rows, vocab, 0.5f, dlogits.data(), nullptr, &total);
  double want = 1.0;
  for (int64_t r = 0; r < rows; ++r) {
    if (labels[r] < 0) continue;
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(double(logits[r * vocab + j]));
    want += std::log(sum) - logits[r * vocab + labels[r]];
  }
  EXPECT_NEAR(total, want, 1e-5);
  for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(dlogits[1 * vocab + j], 0.0f);  // the ignored row
  expect_gradient("logits", logits, dlogits, [&] {
    double loss = 0;
    ops().cross_entropy(logits.data(), labels.data(), rows, vocab, 0.0f, nullptr, nullptr, &loss);
    return 0.5 * loss;
  });
}

// The bf16 gradient is the f32 one rounded, bit for bit, whether or not the f32 one is written too (rows
// longer than the pieces the bf16-only path works in, the label in a later piece).
TEST(OpsGradient, CrossEntropyBf16GradientIsTheF32OneRounded) {
  const int64_t rows = 3, vocab = 5000;
  const Vec logits = random_vec(rows * vocab, 2, 6.0f);
  const std::vector<int32_t> labels = {4321, -100, 17};
  Vec dlogits(rows * vocab);
  std::vector<BFloat16> both(dlogits.size()), alone(dlogits.size());
  double loss = 0, loss_alone = 0;
  ops().cross_entropy(logits.data(), labels.data(), rows, vocab, 0.25f, dlogits.data(), both.data(), &loss);
  ops().cross_entropy(logits.data(), labels.data(), rows, vocab, 0.25f, nullptr, alone.data(), &loss_alone);
  EXPECT_EQ(loss_alone, loss);
  for (size_t i = 0; i < dlogits.size(); ++i) {
    ASSERT_EQ(both[i].bits, f32_to_bf16(dlogits[i])) << i;
    ASSERT_EQ(alone[i].bits, both[i].bits) << i;
  }
  EXPECT_LT(dlogits[4321], 0.0f);  // the label's gradient is p - 1
  for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(alone[size_t(vocab + j)].bits, 0);  // the ignored row
}

TEST(OpsGradient, GroupByExpertIsAStableCountingSort) {
  const std::vector<int32_t> choice = {2, 0, 3, 2, 1, 0, 3, 2};  // 3 = skip with 3 experts
  std::vector<int32_t> order(choice.size());
  std::vector<int64_t> offsets(4);
  ops().group_by_expert(choice.data(), int64_t(choice.size()), 3, order.data(), offsets.data());
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 2, 3, 6}));
  EXPECT_EQ(order, (std::vector<int32_t>{1, 5, 4, 0, 3, 7, 2, 6}));  // the skip-routed last
}

// The grouped products: each group's rows times its own matrix, the rows past the last group zeroed; their
// weight gradients each group's A^T B added on. Against sums in double of the (bf16-rounded) operands.
TEST(OpsGradient, GroupedProductsMultiplyEachGroupByItsMatrix) {
  const int64_t rows = 11, n = 5, k = 7, groups = 3;
  const std::vector<int64_t> offsets = {0, 4, 4, 9};  // group 1 empty, rows 9 and 10 past the groups
  const Vec a = random_vec(size_t(rows * k), 31), b = random_vec(size_t(groups * n * k), 32);
  const auto group_of = [&](int64_t r) { return r < 4 ? 0 : 2; };
  for (Precision precision : {Precision::F32, Precision::BF16}) {
    const auto in = [&](float v) {
      return double(precision == Precision::BF16 ? bf16_to_f32(f32_to_bf16(v)) : v);
    };
    Vec c(size_t(rows * n), 5.0f);  // [rows, n]
    ops().grouped_gemm(precision, Trans::Yes, offsets.data(), groups, rows, n, k, a.data(), k, b.data(),
                       n * k, k, c.data(), n);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t i = 0; r < 9 && i < k; ++i) {
          sum += in(a[size_t(r * k + i)]) * in(b[size_t((group_of(r) * n + j) * k + i)]);
        }
        EXPECT_NEAR(c[size_t(r * n + j)], sum, 1e-5 * (1 + std::abs(sum))) << r << ", " << j;
      }
    }

    // dw [groups, k, n] += a's rows of g [., k]^T @ c's rows of g [., n]; the empty group's stays.
    const Vec start = random_vec(size_t(groups * k * n), 33);
    Vec dw = start;
    ops().grouped_weight_gradient(precision, offsets.data(), groups, k, n, a.data(), k, c.data(), n,
                                  dw.data());
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t i = 0; i < k; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = start[size_t((g * k + i) * n + j)];
          for (int64_t r = offsets[size_t(g)]; r < offsets[size_t(g + 1)]; ++r) {
            sum += in(a[size_t(r * k + i)]) * in(c[size_t(r * n + j)]);
          }
          EXPECT_NEAR(dw[size_t((g * k + i) * n + j)], sum, 1e-5 * (1 + std::abs(sum))) << g << ", " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace zaya
