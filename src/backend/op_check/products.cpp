// The op check's calls of the products family (op_table.h).

#include <algorithm>

#include "backend/op_check/call.h"
#include "core/error.h"

namespace zaya::op_check {
namespace {

std::vector<BFloat16> to_bf16(const std::vector<float>& values) {
  std::vector<BFloat16> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i].bits = f32_to_bf16(values[i]);
  return out;
}

// The offsets [E + 1] of rows grouped by expert over T rows: random sizes, expert 1 given none, about a
// sixth of the rows past the last group (the skip-routed tokens).
std::vector<int64_t> group_offsets(Call& call, const Sizes& s) {
  std::vector<int64_t> offsets(size_t(s.E + 1), 0);
  for (const float draw : call.random(s.T)) {
    const float u = 0.5f * (draw + 1.0f);  // in [0, 1)
    if (u < 1.0f / 6) continue;
    int64_t e = std::min(s.E - 1, int64_t(u * float(s.E)));
    if (e == 1 && s.E > 2) e = 2;
    ++offsets[size_t(e + 1)];
  }
  for (int64_t e = 0; e < s.E; ++e) offsets[size_t(e + 1)] += offsets[size_t(e)];
  return offsets;
}

// The experts' products as the model runs them, grouped by offsets in device memory.
void grouped_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const bool bf16 = s.precision == Precision::BF16;
  const std::string weight = bf16 ? " (W bf16)" : "";
  const int64_t I2 = 2 * s.I;
  add(calls, "grouped_gemm", cat("x W_e^T ", dims({s.T, s.H}), " x ", dims({s.E, I2, s.H}), weight),
      [s, I2](Call& c) {
        const auto offsets = c.input("offsets", group_offsets(c, s));  // [E + 1]
        const auto w = c.random(s.E * I2 * s.H, 0.1f);                 // [E, 2I, H]
        const auto x = c.uniform("x", s.T * s.H);                      // [T, H]
        const auto w32 = c.input("W", w);
        const auto w16 = c.input("W bf16", to_bf16(w));
        const auto y = c.output("y", s.T * I2);  // [T, 2I], the rows past the groups zeroed
        c.run([=](Ops& ops, const Placed& a) {
          const Operand b = s.precision == Precision::BF16 ? Operand(a(w16)) : Operand(a(w32));
          ops.grouped_gemm(s.precision, Trans::Yes, a(offsets), s.E, s.T, I2, s.H, a(x), s.H, b, I2 * s.H,
                           s.H, a(y), I2);
        });
      });
  add(calls, "grouped_gemm", cat("dY W_e ", dims({s.T, s.H}), " x ", dims({s.E, s.H, s.I}), weight),
      [s](Call& c) {
        const auto offsets = c.input("offsets", group_offsets(c, s));  // [E + 1]
        const auto w = c.random(s.E * s.H * s.I, 0.1f);                // [E, H, I]
        const auto dy = c.uniform("dY", s.T * s.H);                    // [T, H]
        const auto w32 = c.input("W", w);
        const auto w16 = c.input("W bf16", to_bf16(w));
        const auto dx = c.output("dX", s.T * s.I);  // [T, I]
        c.run([=](Ops& ops, const Placed& a) {
          const Operand b = s.precision == Precision::BF16 ? Operand(a(w16)) : Operand(a(w32));
          ops.grouped_gemm(s.precision, Trans::No, a(offsets), s.E, s.T, s.I, s.H, a(dy), s.H, b, s.H * s.I,
                           s.I, a(dx), s.I);
        });
      });
  add(calls, "grouped_weight_gradient", cat("dW_e += dY^T x ", dims({s.T, I2}), "^T x ", dims({s.T, s.H})),
      [s, I2](Call& c) {
        const auto offsets = c.input("offsets", group_offsets(c, s));  // [E + 1]
        const auto dy = c.uniform("dY", s.T * I2);                     // [T, 2I]
        const auto x = c.uniform("x", s.T * s.H);                      // [T, H]
        const auto dw = c.updated("dW", s.E * I2 * s.H);               // [E, 2I, H], accumulated
        c.run([=](Ops& ops, const Placed& a) {
          ops.grouped_weight_gradient(s.precision, a(offsets), s.E, I2, s.H, a(dy), I2, a(x), s.H, a(dw));
        });
      });
}

}  // namespace

// Products: the experts' (the most FLOPs of a step) forward, input gradient and weight gradient, the
// weight read as the model reads it (a bf16 run's copy, or the f32 values).
void products_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const bool bf16 = s.precision == Precision::BF16;
  const std::string weight = bf16 ? " (W bf16)" : "";
  const int64_t I2 = 2 * s.I;
  add(calls, "gemm", cat("x W^T ", dims({s.T, s.H}), " x ", dims({I2, s.H}), "^T", weight), [s, I2](Call& c) {
    const auto w = c.random(I2 * s.H, 0.1f);         // [2I, H]
    const auto x = c.uniform("x", s.T * s.H);        // [T, H]
    const auto w32 = c.input("W", w);                // [2I, H]
    const auto w16 = c.input("W bf16", to_bf16(w));  // [2I, H]
    const auto y = c.output("y", s.T * I2);          // [T, 2I]
    c.run([=](Ops& ops, const Placed& a) {
      const Operand b = s.precision == Precision::BF16 ? Operand(a(w16)) : Operand(a(w32));
      ops.gemm(s.precision, Trans::No, Trans::Yes, s.T, I2, s.H, 1.0f, a(x), s.H, b, s.H, 0.0f, a(y), I2);
    });
  });
  add(calls, "gemm", cat("dY W ", dims({s.T, I2}), " x ", dims({I2, s.H}), weight), [s, I2](Call& c) {
    const auto w = c.random(I2 * s.H, 0.1f);         // [2I, H]
    const auto dy = c.uniform("dY", s.T * I2);       // [T, 2I]
    const auto w32 = c.input("W", w);                // [2I, H]
    const auto w16 = c.input("W bf16", to_bf16(w));  // [2I, H]
    const auto dx = c.output("dX", s.T * s.H);       // [T, H]
    c.run([=](Ops& ops, const Placed& a) {
      const Operand b = s.precision == Precision::BF16 ? Operand(a(w16)) : Operand(a(w32));
      ops.gemm(s.precision, Trans::No, Trans::No, s.T, s.H, I2, 1.0f, a(dy), I2, b, s.H, 0.0f, a(dx), s.H);
    });
  });
  add(calls, "gemm", cat("dW += dY^T x ", dims({s.T, I2}), "^T x ", dims({s.T, s.H})), [s, I2](Call& c) {
    const auto dy = c.uniform("dY", s.T * I2);  // [T, 2I]
    const auto x = c.uniform("x", s.T * s.H);   // [T, H]
    const auto dw = c.updated("dW", I2 * s.H);  // [2I, H], accumulated (beta 1)
    c.run([=](Ops& ops, const Placed& a) {
      ops.gemm(s.precision, Trans::Yes, Trans::No, I2, s.H, s.T, 1.0f, a(dy), I2, a(x), s.H, 1.0f, a(dw),
               s.H);
    });
  });
  grouped_calls(s, calls);
  add(calls, "convert_to_bf16", cat("experts' weights ", dims({s.E, I2, s.H})), [s](Call& c) {
    const int64_t n = s.optimizer_count();
    const auto src = c.uniform("f32", n);            // [E, 2I, H]
    const auto dst = c.output<BFloat16>("bf16", n);  // [E, 2I, H]
    c.run([=](Ops& ops, const Placed& a) { ops.convert_to_bf16(a(src), n, a(dst)); });
  });
  // The q projection's bias on its columns of the [T, C] rows that hold q then k.
  add(calls, "add_bias", cat("q bias on ", dims({s.T, s.QD}), " of ", dims({s.T, s.C})), [s](Call& c) {
    const auto y = c.updated("y", s.T * s.C);   // [T, C]
    const auto bias = c.uniform("bias", s.QD);  // [QD]
    c.run([=](Ops& ops, const Placed& a) { ops.add_bias(a(y), s.T, s.QD, s.C, a(bias)); });
  });
  add(calls, "bias_backward", cat("q bias from ", dims({s.T, s.QD}), " of ", dims({s.T, s.C})), [s](Call& c) {
    const auto dy = c.uniform("dy", s.T * s.C);   // [T, C]
    const auto dbias = c.updated("dbias", s.QD);  // [QD], accumulated
    c.run([=](Ops& ops, const Placed& a) { ops.bias_backward(a(dy), s.T, s.QD, s.C, a(dbias)); });
  });
}

}  // namespace zaya::op_check
