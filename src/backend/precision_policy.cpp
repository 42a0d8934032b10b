#include "backend/precision_policy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "backend/devices.h"
#include "backend/ops.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"

namespace zaya {

Precision choose_precision(const PrecisionRates& rates) {
  return rates.bf16 >= kBf16Margin * rates.fp32 && rates.bf16 > 0 ? Precision::BF16 : Precision::F32;
}

namespace {

// One shape's operands on the device: A [m, k] and B [n, k] in f32 and in bf16, C [m, n].
struct ProbeOperands {
  AlignedBuffer a, b, a16, b16, c;
  ProbeOperands(Ops& ops, const ProductShape& s, uint64_t stream)
      : a(size_t(s.m * s.k) * sizeof(float), ops.memory()),
        b(size_t(s.n * s.k) * sizeof(float), ops.memory()),
        a16(size_t(s.m * s.k) * sizeof(BFloat16), ops.memory()),
        b16(size_t(s.n * s.k) * sizeof(BFloat16), ops.memory()),
        c(size_t(s.m * s.n) * sizeof(float), ops.memory()) {
    const RandomStream rng(3, RngPurpose::Test, stream);
    std::vector<float> host(size_t(std::max(s.m, s.n) * s.k));
    for (size_t i = 0; i < host.size(); ++i) host[i] = rng.uniform(i) - 0.5f;
    ops.copy_from_host(a.data(), host.data(), a.size());
    ops.copy_from_host(b.data(), host.data(), b.size());
    ops.convert_to_bf16(a.as<float>(), s.m * s.k, a16.as<BFloat16>());
    ops.convert_to_bf16(b.as<float>(), s.n * s.k, b16.as<BFloat16>());
  }
};

double seconds_of(Ops& ops, const ProductShape& s, ProbeOperands& x, Precision precision) {
  const bool bf16 = precision == Precision::BF16;
  ops.synchronize();
  const auto start = std::chrono::steady_clock::now();
  ops.gemm(precision, Trans::No, Trans::Yes, s.m, s.n, s.k, 1.0f,
           bf16 ? Operand(x.a16.as<BFloat16>()) : Operand(x.a.as<float>()), s.k,
           bf16 ? Operand(x.b16.as<BFloat16>()) : Operand(x.b.as<float>()), s.k, 0.0f, x.c.as<float>(), s.n);
  ops.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

PrecisionRates measure_precision_rates(Ops& ops, const std::vector<ProductShape>& shapes, double seconds) {
  // On one thread: the ratio of the two paths is a property of a core, and one busy core of the machine then
  // leaves the other to measure on, instead of stalling every product of a measurement split over both.
  const ThreadCountScope one_thread(1);
  std::vector<ProbeOperands> operands;
  double flops = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    operands.emplace_back(ops, shapes[i], i);
    flops += 2.0 * double(shapes[i].m) * double(shapes[i].n) * double(shapes[i].k);
  }
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<double> fastest[2] = {std::vector<double>(shapes.size(), kNever),
                                    std::vector<double>(shapes.size(), kNever)};
  bool bf16_runs = true;
  const auto start = std::chrono::steady_clock::now();
  // Round 0 warms the caches and makes oneDNN's kernels; the precisions alternate, so that a busy moment
  // slows both alike.
  for (int round = 0;; ++round) {
    for (Precision precision : {Precision::F32, Precision::BF16}) {
      if (precision == Precision::BF16 && !bf16_runs) continue;
      for (size_t i = 0; i < shapes.size(); ++i) {
        double time = 0;
        try {
          time = seconds_of(ops, shapes[i], operands[i], precision);
        } catch (const Error&) {  // no bf16 product on this CPU at all
          if (precision == Precision::F32) throw;
          bf16_runs = false;
          break;
        }
        if (round > 0) fastest[int(precision)][i] = std::min(fastest[int(precision)][i], time);
      }
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (round >= 3 && elapsed >= seconds) break;
  }
  auto rate = [&](Precision precision) {
    double total = 0;
    for (double time : fastest[int(precision)]) total += time;
    return total > 0 && total < kNever ? flops / total : 0.0;
  };
  return {rate(Precision::F32), bf16_runs ? rate(Precision::BF16) : 0.0};
}

Precision precision_setting(const std::string& setting, const char* field) {
  if (const std::optional<Precision> precision = precision_from_name(setting)) return *precision;
  throw Error("expected \"auto\", \"fp32\" or \"bf16\", got \"" + setting + "\"").field(field);
}

PrecisionChoice resolve_precision(const std::string& setting, const Device& device,
                                  const std::vector<ProductShape>& shapes, const char* field) {
  if (setting != "auto") {
    const Precision precision = precision_setting(setting, field);
    return {precision, describe_precision(precision, "")};
  }
  if (!device.on_host()) {
    return {Precision::BF16,
            describe_precision(Precision::BF16, "auto: every GPU multiplies bf16 at full speed")};
  }
  const PrecisionRates rates = measure_precision_rates(*device.ops, shapes);
  const Precision precision = choose_precision(rates);
  const std::string measured =
      rates.bf16 > 0 ? cat("bf16 ", std::lround(rates.bf16 / 1e9), " against fp32 ",
                           std::lround(rates.fp32 / 1e9), " GFLOP/s on this model's products (",
                           std::lround(rates.bf16 / rates.fp32 * 100) / 100.0, "x)")
                     : cat("this CPU has no bf16 products; fp32 ", std::lround(rates.fp32 / 1e9), " GFLOP/s");
  return {precision, describe_precision(precision, cat("auto, measured: ", measured, "; bf16 is chosen from ",
                                                       kBf16Margin, "x"))};
}

std::string describe_precision(Precision precision, const std::string& why) {
  std::string out = cat("precision ", precision_name(precision));
  if (precision == Precision::BF16) {
    out +=
        " (bf16 products with f32 sums; f32 master weights, optimizer state, norms, softmax, router, loss)";
  }
  if (!why.empty()) out += cat(": ", why);
  return out;
}

}  // namespace zaya
