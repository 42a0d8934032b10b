// The op check's calls of the cca family (op_table.h).

#include <cmath>

#include "backend/op_check/call.h"
#include "core/error.h"

namespace zaya::op_check {
namespace {

// cos and sin [S, rotary / 2] of RoPE's angles s * theta^(-2i / rotary).
std::pair<std::vector<float>, std::vector<float>> rope_tables(const Sizes& s) {
  const int64_t half = s.rotary / 2;
  std::vector<float> cos(size_t(s.S * half)), sin(cos.size());
  for (int64_t p = 0; p < s.S; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(p) * std::pow(s.theta, -2.0 * double(i) / double(s.rotary));
      cos[size_t(p * half + i)] = float(std::cos(angle));
      sin[size_t(p * half + i)] = float(std::sin(angle));
    }
  }
  return {cos, sin};
}

// The q-k mean skip, forward and backward.
void qk_mean_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const AttentionShape shape = s.attention(0);
  add(calls, "qk_mean_forward", cat("q, k of ", dims({s.T, s.C})), [s, shape](Call& c) {
    const auto qk = c.uniform("qk", s.T * s.C);        // [T, C]: q then k
    const auto q_res = c.output("q_res", s.T * s.QD);  // [T, QD]
    const auto k_res = c.output("k_res", s.T * s.KD);  // [T, KD]
    c.run(
        [=](Ops& ops, const Placed& a) { ops.qk_mean_forward(a(qk), s.T, s.C, shape, a(q_res), a(k_res)); });
  });
  add(calls, "qk_mean_backward", cat("into ", dims({s.T, s.C})), [s, shape](Call& c) {
    const auto dq_res = c.uniform("dq_res", s.T * s.QD);  // [T, QD]
    const auto dk_res = c.uniform("dk_res", s.T * s.KD);  // [T, KD]
    const auto dqk = c.updated("dqk", s.T * s.C);         // [T, C], accumulated
    c.run([=](Ops& ops, const Placed& a) {
      ops.qk_mean_backward(a(dq_res), a(dk_res), s.T, s.C, shape, a(dqk));
    });
  });
}

// The two causal convolutions, forward, backward, and for one decoded token.
void convolution_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const AttentionShape shape = s.attention(0);
  const int64_t dw_rows = s.B * (s.S + s.k1 - 1);  // the depthwise output's positions
  const std::string conv = cat(dims({s.B, s.S, s.C}), ", kernels ", s.k0, " and ", s.k1,
                               s.precision == Precision::BF16 ? ", bf16" : "");
  add(calls, "cca_conv_forward", conv, [s, shape, dw_rows](Call& c) {
    const auto x = c.uniform("x", s.T * s.C);                              // [B, S, C]
    const auto dw_weight = c.uniform("dw_weight", s.C * s.k0);             // [C, 1, k0]
    const auto dw_bias = c.uniform("dw_bias", s.C);                        // [C]
    const auto g_weight = c.uniform("g_weight", s.C * s.D * s.k1, 0.25f);  // [C, D, k1]
    const auto g_bias = c.uniform("g_bias", s.C);                          // [C]
    const auto dw = c.output("dw", dw_rows * s.C);                         // [B, S + k1 - 1, C]
    const auto out = c.output("out", s.T * s.C);                           // [B, S, C]
    const auto scratch =
        c.scratch("scratch", [=](Ops& ops) { return ops.cca_conv_scratch(shape, s.k0, s.k1); });
    c.run([=](Ops& ops, const Placed& a) {
      ops.cca_conv_forward(s.precision, a(x), shape, s.k0, s.k1, a(dw_weight), a(dw_bias), a(g_weight),
                           a(g_bias), a(dw), a(out), a(scratch));
    });
  });
  add(calls, "cca_conv_backward", conv, [s, shape, dw_rows](Call& c) {
    const auto x = c.uniform("x", s.T * s.C);                              // [B, S, C]
    const auto dw_weight = c.uniform("dw_weight", s.C * s.k0);             // [C, 1, k0]
    const auto dw_bias = c.uniform("dw_bias", s.C);                        // [C]
    const auto g_weight = c.uniform("g_weight", s.C * s.D * s.k1, 0.25f);  // [C, D, k1]
    const auto g_bias = c.uniform("g_bias", s.C);                          // [C]
    const auto dw = c.saved("dw", dw_rows * s.C);                          // [B, S + k1 - 1, C]
    const auto out = c.scratch("out", [s](Ops&) { return s.T * s.C; });    // [B, S, C], unused
    const auto dout = c.uniform("dout", s.T * s.C);                        // [B, S, C]
    const auto dx = c.output("dx", s.T * s.C);                             // [B, S, C]
    // The parameter gradients, accumulated.
    const auto d_dw_weight = c.updated("d_dw_weight", s.C * s.k0);      // [C, 1, k0]
    const auto d_dw_bias = c.updated("d_dw_bias", s.C);                 // [C]
    const auto d_g_weight = c.updated("d_g_weight", s.C * s.D * s.k1);  // [C, D, k1]
    const auto d_g_bias = c.updated("d_g_bias", s.C);                   // [C]
    const auto scratch =
        c.scratch("scratch", [=](Ops& ops) { return ops.cca_conv_scratch(shape, s.k0, s.k1); });
    c.prepare([=](Ops& ops, const Placed& a) {
      ops.cca_conv_forward(s.precision, a(x), shape, s.k0, s.k1, a(dw_weight), a(dw_bias), a(g_weight),
                           a(g_bias), a(dw), a(out), a(scratch));
    });
    c.run([=](Ops& ops, const Placed& a) {
      ops.cca_conv_backward(s.precision, a(x), a(dw), a(dout), shape, s.k0, s.k1, a(dw_weight), a(g_weight),
                            a(dx), a(d_dw_weight), a(d_dw_bias), a(d_g_weight), a(d_g_bias), a(scratch));
    });
  });
  const int64_t window_rows = (s.k0 - 1) + (s.k1 - 1) + 1;
  add(calls, "cca_conv_decode",
      cat("windows ", dims({s.B, window_rows, s.C}), ", kernels ", s.k0, " and ", s.k1),
      [s, shape, window_rows](Call& c) {
        const auto window = c.uniform("window", s.B * window_rows * s.C);      // [B, rows, C]
        const auto dw_weight = c.uniform("dw_weight", s.C * s.k0);             // [C, 1, k0]
        const auto dw_bias = c.uniform("dw_bias", s.C);                        // [C]
        const auto g_weight = c.uniform("g_weight", s.C * s.D * s.k1, 0.25f);  // [C, D, k1]
        const auto g_bias = c.uniform("g_bias", s.C);                          // [C]
        const auto out = c.output("out", s.B * s.C);                           // [B, C]
        c.run([=](Ops& ops, const Placed& a) {
          ops.cca_conv_decode(a(window), shape, s.k0, s.k1, a(dw_weight), a(dw_bias), a(g_weight), a(g_bias),
                              a(out));
        });
      });
}

// The L2 norm with the key temperature, and RoPE.
void norm_and_rope_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  // The keys' norm, with the key temperature (the queries' is the same op without it).
  add(calls, "l2norm_forward", cat("keys ", dims({s.T, s.kv_heads, s.D}), " with temp"), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.KD, 2.0f);         // [T, KV, D]
    const auto temp = c.uniform("temp", s.kv_heads);         // [KV]
    const auto out = c.output("out", s.T * s.KD);            // [T, KV, D]
    const auto norms = c.output("norms", s.T * s.kv_heads);  // [T, KV]
    c.run([=](Ops& ops, const Placed& a) {
      ops.l2norm_forward(a(x), s.T, s.kv_heads, s.D, a(temp), a(out), a(norms));
    });
  });
  add(calls, "l2norm_backward", cat("keys ", dims({s.T, s.kv_heads, s.D}), " with temp"), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.KD, 2.0f);                      // [T, KV, D]
    const auto temp = c.uniform("temp", s.kv_heads);                      // [KV]
    const auto out = c.scratch("out", [s](Ops&) { return s.T * s.KD; });  // [T, KV, D], unused
    const auto norms = c.saved("norms", s.T * s.kv_heads);                // [T, KV]
    const auto dout = c.uniform("dout", s.T * s.KD);                      // [T, KV, D]
    const auto dx = c.output("dx", s.T * s.KD);                           // [T, KV, D]
    const auto dtemp = c.updated("dtemp", s.kv_heads);                    // [KV], accumulated
    c.prepare([=](Ops& ops, const Placed& a) {
      ops.l2norm_forward(a(x), s.T, s.kv_heads, s.D, a(temp), a(out), a(norms));
    });
    c.run([=](Ops& ops, const Placed& a) {
      ops.l2norm_backward(a(x), a(norms), a(dout), s.T, s.kv_heads, s.D, a(temp), a(dx), a(dtemp));
    });
  });
  add(calls, "rope", cat("queries ", dims({s.B, s.S, s.heads, s.D}), ", rotary ", s.rotary), [s](Call& c) {
    const auto [cos_values, sin_values] = rope_tables(s);
    const auto x = c.updated("x", s.T * s.QD, 3.0f);  // [B, S, heads, D], in place
    const auto cos = c.input("cos", cos_values);      // [S, rotary / 2]
    const auto sin = c.input("sin", sin_values);      // [S, rotary / 2]
    c.run([=](Ops& ops, const Placed& a) {
      ops.rope(a(x), s.B, s.S, s.heads, s.D, s.rotary, a(cos), a(sin), false);
    });
  });
}

}  // namespace

void cca_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  qk_mean_calls(s, calls);
  convolution_calls(s, calls);
  norm_and_rope_calls(s, calls);
}

}  // namespace zaya::op_check
