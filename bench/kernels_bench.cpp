// Micro-benchmarks of the CPU backend's kernels (Google Benchmark), at the shapes each names.
// Run: build/bench/zaya_kernels_bench [--benchmark_filter=...]

#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "backend/ops.h"
#include "core/rng.h"
#include "infer/generator.h"
#include "infer/token_logprobs.h"

namespace zaya {
namespace {

std::vector<float> random_floats(size_t n, uint64_t stream) {
  const RandomStream rng(3, RngPurpose::Test, stream);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = rng.normal(i);
  return out;
}

// random_floats rounded to bf16, as the model's weight copies are.
std::vector<BFloat16> random_bf16(size_t n, uint64_t stream) {
  const std::vector<float> values = random_floats(n, stream);
  std::vector<BFloat16> out(n);
  cpu_ops().convert_to_bf16(values.data(), int64_t(n), out.data());
  return out;
}

// A counter of `amount` (FLOPs, bytes) per iteration, shown per second.
benchmark::Counter per_second(double amount, const benchmark::State& state) {
  return benchmark::Counter(amount * double(state.iterations()), benchmark::Counter::kIsRate,
                            benchmark::Counter::kIs1000);
}

void BM_CrossEntropy(benchmark::State& state) {
  const int64_t rows = state.range(0), vocab = state.range(1);
  std::vector<float> logits = random_floats(size_t(rows * vocab), 1), grads(logits.size());
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) labels[size_t(r)] = int32_t((r * 7919) % vocab);
  double loss = 0;
  for (auto _ : state) {
    cpu_ops().cross_entropy(logits.data(), labels.data(), rows, vocab, 1.0f, grads.data(), nullptr, &loss);
    benchmark::DoNotOptimize(loss);
  }
  state.SetItemsProcessed(state.iterations() * rows * vocab);
}
BENCHMARK(BM_CrossEntropy)->Args({1024, 8192})->Unit(benchmark::kMillisecond);

void BM_Gemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool trans_a = state.range(3);
  std::vector<float> a = random_floats(size_t(m * k), 1), b = random_floats(size_t(k * n), 2),
                     c(size_t(m * n));
  for (auto _ : state) {
    cpu_ops().gemm(trans_a ? Trans::Yes : Trans::No, Trans::No, m, n, k, 1.0f, a.data(), trans_a ? m : k,
                   b.data(), n, 0.0f, c.data(), n);
  }
  state.counters["GFLOP/s"] = per_second(2.0 * double(m * n * k), state);
}
// Forward projections [T, H] x [H, out], weight gradients [out, T] x [T, H], and square.
BENCHMARK(BM_Gemm)
    ->Args({8192, 256, 256, 0})
    ->Args({256, 256, 8192, 1})
    ->Args({1024, 512, 256, 0})
    ->Args({8192, 8192, 256, 0})
    ->Args({1024, 1024, 1024, 0})
    ->Unit(benchmark::kMillisecond);

// bf16 training products whose m or k is an expert's row count (929 here, off the sizes that get
// primitives of their own, so given to oneDNN at run time): the gated up projection [rows, H] x [2I, H]^T
// (0), its input gradient [rows, 2I] x [2I, H] (1), and its weight gradient [rows, 2I]^T x [rows, H] summed
// into the gradient (2), at the untuned shape of issue 13 (H 768, 2I 4096); bf16 operands, as the model
// passes them.
void BM_Bf16ExpertProduct(benchmark::State& state) {
  const int64_t rows = 929, hidden = 768, up = 4096, kind = state.range(0);
  const int64_t m = kind == 2 ? up : rows, n = kind == 0 ? up : hidden,
                k = kind == 0   ? hidden
                    : kind == 1 ? up
                                : rows;
  const Trans ta = kind == 2 ? Trans::Yes : Trans::No, tb = kind == 0 ? Trans::Yes : Trans::No;
  const std::vector<BFloat16> a = random_bf16(size_t(m * k), 1), b = random_bf16(size_t(k * n), 2);
  std::vector<float> c(size_t(m * n));
  for (auto _ : state) {
    cpu_ops().gemm(Precision::BF16, ta, tb, m, n, k, 1.0f, a.data(), ta == Trans::Yes ? m : k, b.data(),
                   tb == Trans::Yes ? k : n, kind == 2 ? 1.0f : 0.0f, c.data(), n);
  }
  state.counters["GFLOP/s"] = per_second(2.0 * double(m * n * k), state);
}
BENCHMARK(BM_Bf16ExpertProduct)->DenseRange(0, 2)->ArgName("kind")->Unit(benchmark::kMillisecond);

// Decoding's products: a few rows (one per running sequence) by a bf16 weight stored [n, k], as the
// `medium` preset's LM head (32768 x 1024), an expert's gated up projection (2048 x 1024) and a square
// projection. The rate counted is the weight bytes read per second: a decode step's bound.
void BM_DecodeProduct(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  std::vector<float> a = random_floats(size_t(m * k), 1), c(size_t(m * n));
  const std::vector<BFloat16> b = random_bf16(size_t(n * k), 2);
  for (auto _ : state) {
    cpu_ops().gemm(Precision::BF16, Trans::No, Trans::Yes, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f,
                   c.data(), n);
  }
  state.counters["weight GB/s"] = per_second(double(n * k * int64_t(sizeof(BFloat16))), state);
}
BENCHMARK(BM_DecodeProduct)
    ->ArgsProduct({{1, 2, 4, 8}, {32768}, {1024}})
    ->ArgsProduct({{1, 8}, {2048, 1024}, {1024}})
    ->ArgNames({"m", "n", "k"})
    ->Unit(benchmark::kMicrosecond);

// The same product against 64 different [2048, 1024] weights in turn (256 MB, as a decode step reads its
// experts): from memory, not from the last-level cache the single matrix above stays in. m of 1 to 8 is a
// decode step's (one row per sequence); 16 to 128 a prefill's (the prompts' tokens routed to one expert: 16
// on average for 8 prompts of 32 tokens over `medium`'s 16 experts), where the rate in FLOPs counts too.
void BM_DecodeProductFromMemory(benchmark::State& state) {
  const int64_t m = state.range(0), n = 2048, k = 1024, matrices = 64;
  std::vector<float> a = random_floats(size_t(m * k), 1), c(size_t(m * n));
  const std::vector<BFloat16> weights = random_bf16(size_t(n * k), 2);
  std::vector<BFloat16> b(size_t(matrices * n * k));
  for (int64_t e = 0; e < matrices; ++e) std::copy(weights.begin(), weights.end(), b.begin() + e * n * k);
  int64_t e = 0;
  for (auto _ : state) {
    cpu_ops().gemm(Precision::BF16, Trans::No, Trans::Yes, m, n, k, 1.0f, a.data(), k, b.data() + e * n * k,
                   k, 0.0f, c.data(), n);
    e = (e + 1) % matrices;
  }
  state.counters["weight GB/s"] = per_second(double(n * k * int64_t(sizeof(BFloat16))), state);
  state.counters["GFLOP/s"] = per_second(2.0 * double(m * n * k), state);
}
BENCHMARK(BM_DecodeProductFromMemory)
    ->Arg(1)
    ->Arg(2)
    ->Arg(8)
    ->Arg(16)
    ->Arg(24)
    ->Arg(32)
    ->Arg(40)
    ->Arg(48)
    ->Arg(64)
    ->Arg(128)
    ->ArgName("m")
    ->Unit(benchmark::kMicrosecond);

// The CCA convolutions' last position for B sequences decoding (`medium`: 8 + 2 heads of 128, kernels of 2),
// against one grouped weight (1.3 MB in f32, cached) or against 64 in turn (from memory, as in a decode step,
// which reads the other layers' weights in between).
void BM_CcaConvDecode(benchmark::State& state) {
  const int64_t B = state.range(0), weights = state.range(1), d = 128, C = 10 * d, k0 = 2, k1 = 2, rows = 3;
  const AttentionShape shape{B, rows, 8, 2, d, 0};
  std::vector<float> window = random_floats(size_t(B * rows * C), 1), dw = random_floats(size_t(C * k0), 2),
                     dw_bias = random_floats(size_t(C), 3),
                     g = random_floats(size_t(weights * C * d * k1), 4), g_bias = random_floats(size_t(C), 5),
                     out(size_t(B * C));
  int64_t w = 0;
  for (auto _ : state) {
    cpu_ops().cca_conv_decode(window.data(), shape, k0, k1, dw.data(), dw_bias.data(),
                              g.data() + w * C * d * k1, g_bias.data(), out.data());
    w = (w + 1) % weights;
  }
}
BENCHMARK(BM_CcaConvDecode)
    ->ArgsProduct({{1, 8}, {1, 64}})
    ->ArgNames({"sequences", "weights"})
    ->Unit(benchmark::kMicrosecond);

// Decoding's attention: B sequences, one new token each, against caches of `length` positions (`medium`: 8
// query and 2 key-value heads of 128), one cache per sequence and layer in turn, as a decode step reads them.
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t B = state.range(0), length = state.range(1), layers = 8, H = 8, KV = 2, D = 128;
  const AttentionShape shape{B, 1, H, KV, D, 0};
  std::vector<float> q = random_floats(size_t(B * H * D), 1), out(q.size());
  std::vector<std::vector<float>> key_caches, value_caches;  // [layers * B]: each layer's of each sequence
  std::vector<const float*> keys, values;                    // [layers * B]
  for (int64_t c = 0; c < layers * B; ++c) {
    key_caches.push_back(random_floats(size_t(length * KV * D), uint64_t(2 + 2 * c)));
    value_caches.push_back(random_floats(size_t(length * KV * D), uint64_t(3 + 2 * c)));
    keys.push_back(key_caches.back().data());  // the buffer stays where it is when the outer vector grows
    values.push_back(value_caches.back().data());
  }
  const std::vector<int64_t> lengths(size_t(B), length);
  int64_t l = 0;
  for (auto _ : state) {
    cpu_ops().attention_decode(q.data(), keys.data() + l * B, values.data() + l * B, lengths.data(), shape,
                               0.088f, out.data());
    l = (l + 1) % layers;
  }
}
BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{1, 8}, {128, 2048}})
    ->ArgNames({"sequences", "length"})
    ->Unit(benchmark::kMicrosecond);

// Attention of one layer of 4 x 512 tokens, forward or backward, in f32 or bf16 products: `medium`'s (8
// query and 2 key-value heads of 128, shape 0) or 12 query and 4 key-value heads of 64 (groups of 3, whose
// blocks' rows bf16 makes a multiple of 16), without a window (1) or in a sliding window of 256 (2).
void BM_Attention(benchmark::State& state) {
  const AttentionShape shapes[] = {{4, 512, 8, 2, 128, 0}, {4, 512, 12, 4, 64, 0}, {4, 512, 12, 4, 64, 256}};
  const AttentionShape shape = shapes[state.range(2)];
  const int64_t tokens = shape.batch * shape.seq, qn = tokens * shape.heads * shape.head_dim,
                kn = tokens * shape.kv_heads * shape.head_dim;
  std::vector<float> q = random_floats(size_t(qn), 1), k = random_floats(size_t(kn), 2),
                     v = random_floats(size_t(kn), 3);
  std::vector<float> o(static_cast<size_t>(qn)), lse(size_t(shape.batch * shape.heads * shape.seq)),
      dq(static_cast<size_t>(qn)), dk(static_cast<size_t>(kn)), dv(static_cast<size_t>(kn));
  const bool backward = state.range(0);
  const Precision precision = state.range(1) ? Precision::BF16 : Precision::F32;
  const float scale = 0.088f;
  cpu_ops().attention_forward(precision, q.data(), k.data(), v.data(), nullptr, shape, scale, o.data(),
                              lse.data());
  for (auto _ : state) {
    if (backward) {
      cpu_ops().attention_backward(precision, q.data(), k.data(), v.data(), nullptr, o.data(), lse.data(),
                                   o.data(), shape, scale, dq.data(), dk.data(), dv.data());
    } else {
      cpu_ops().attention_forward(precision, q.data(), k.data(), v.data(), nullptr, shape, scale, o.data(),
                                  lse.data());
    }
  }
}
BENCHMARK(BM_Attention)
    ->ArgsProduct({{0, 1}, {0, 1}, {0, 1, 2}})
    ->ArgNames({"backward", "bf16", "shape"})
    ->Unit(benchmark::kMillisecond);

// What the decode engine does per generated token on the host, over a row of `medium`'s 32768 logits
// (N(0, 2)): choose it greedily (0), draw it at temperature 0.8 with top_p 0.95 (1) or 1.0 (2), or score it
// with logprobs=5 (3).
void BM_TokenChoice(benchmark::State& state) {
  const int64_t vocab = 32768;
  std::vector<float> logits = random_floats(size_t(vocab), 7);
  for (float& z : logits) z *= 2.0f;
  SamplingRule rule;
  rule.temperature = state.range(0) == 0 ? 0.0 : 0.8;
  rule.top_p = state.range(0) == 2 ? 1.0 : 0.95;
  double sink = 0;
  for (auto _ : state) {
    sink += state.range(0) == 3 ? token_logprobs(logits.data(), vocab, 5, 5).token
                                : sample_token(logits.data(), vocab, rule, 0.5);
  }
  benchmark::DoNotOptimize(sink);
}
BENCHMARK(BM_TokenChoice)->DenseRange(0, 3)->ArgName("kind")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace zaya

BENCHMARK_MAIN();
