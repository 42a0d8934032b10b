// The ZAYA router's top-1 choice and the dropless MoE data movement: grouping tokens by expert, gathering
// their rows for one matrix product per expert, scattering the results back scaled by the gate, and the
// experts' SwiGLU.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/destination_rows.h"
#include "core/vec_math.h"

namespace zaya {

void CpuOps::route_top1(const float* logits, const float* biases, int64_t tokens, int64_t routes,
                        float* probs, int32_t* choice, float* gate, float* lse) {
  const int64_t skip = routes - 1;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* z = logits + t * routes;
    float* p = probs + t * routes;
    const float max = *std::max_element(z, z + routes);
    float sum = 0;
    for (int64_t e = 0; e < routes; ++e) sum += p[e] = std::exp(z[e] - max);
    lse[t] = max + std::log(sum);
    int64_t best = 0;
    for (int64_t e = 0; e < routes; ++e) {
      p[e] /= sum;
      if (p[e] + biases[e] > p[best] + biases[best]) best = e;
    }
    choice[t] = int32_t(best);
    gate[t] = best == skip ? 0.0f : p[best];
  }
}

// gate = p[c]: dz[e] = dgate * p[c] * (delta(e, c) - p[e]).
void CpuOps::route_top1_backward(const float* probs, const int32_t* choice, const float* dgate,
                                 int64_t tokens, int64_t routes, float* dlogits) {
  const int64_t skip = routes - 1;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* p = probs + t * routes;
    float* dz = dlogits + t * routes;
    const int64_t c = choice[t];
    if (c == skip) {
      std::fill(dz, dz + routes, 0.0f);
      continue;
    }
    const float through = dgate[t] * p[c];
    for (int64_t e = 0; e < routes; ++e) dz[e] = -through * p[e];
    dz[c] += through;
  }
}

void CpuOps::router_statistics(const float* probs, const float* lse, const int32_t* choice, int64_t tokens,
                               int64_t routes, int64_t* counts, double* prob_sums, double* entropy_sum,
                               double* lse_square_sum) {
  // Sequential over tokens: a fixed order, and cheap next to the router's matrix products.
  for (int64_t t = 0; t < tokens; ++t) {
    ++counts[choice[t]];
    const float* p = probs + t * routes;
    double entropy = 0;
    for (int64_t e = 0; e < routes; ++e) {
      prob_sums[e] += p[e];
      if (p[e] > 0) entropy -= double(p[e]) * std::log(double(p[e]));
    }
    *entropy_sum += entropy;
    *lse_square_sum += double(lse[t]) * lse[t];
  }
}

// With c[e] = d loss / d p[e] (same for every token) and z = z_coef * lse: dlogits[j] += p[j] (c[j] - sum_e
// p[e] c[e]) + z p[j], since d lse / d logits = p.
void CpuOps::router_aux_backward(const float* probs, const float* lse, int64_t tokens, int64_t routes,
                                 const float* route_coef, float z_coef, float* dlogits) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* p = probs + t * routes;
    float mean = 0;
    for (int64_t e = 0; e < routes; ++e) mean += p[e] * route_coef[e];
    const float z = z_coef * lse[t];
    for (int64_t e = 0; e < routes; ++e) dlogits[t * routes + e] += p[e] * (route_coef[e] - mean + z);
  }
}

void CpuOps::group_by_expert(const int32_t* choice, int64_t tokens, int64_t experts, int32_t* order,
                             int64_t* offsets) {
  // Counting sort, the skip route last. offsets[e] first serves as expert e's write cursor, then shifts back
  // into place; the skip-routed tokens follow the routed ones from `skip`.
  std::fill(offsets, offsets + experts + 1, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    if (choice[t] < experts) ++offsets[choice[t] + 1];
  }
  for (int64_t e = 0; e < experts; ++e) offsets[e + 1] += offsets[e];
  int64_t skip = offsets[experts];
  for (int64_t t = 0; t < tokens; ++t)
    order[choice[t] < experts ? offsets[choice[t]]++ : skip++] = int32_t(t);
  for (int64_t e = experts; e > 0; --e) offsets[e] = offsets[e - 1];
  offsets[0] = 0;
}

void CpuOps::gather_rows(const float* src, const int32_t* order, const float* scale, int64_t count, int64_t n,
                         Destination dst) {
  write_rows(dst, count, n, [&](int64_t i, float* out) {
    const float* from = src + int64_t(order[i]) * n;
    if (!scale) {
      std::memcpy(out, from, size_t(n) * sizeof(float));
      return;
    }
    const float factor = scale[order[i]];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) out[j] = factor * from[j];
  });
}

void CpuOps::scatter_rows(const float* src, const int32_t* order, const float* scale, int64_t count,
                          int64_t n, bool accumulate, float* dst) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    float* row = dst + int64_t(order[i]) * n;
    const float* from = src + i * n;
    const float factor = scale ? scale[order[i]] : 1.0f;
    if (accumulate) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) row[j] += factor * from[j];
    } else {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) row[j] = factor * from[j];
    }
  }
}

void CpuOps::gather_dot(const float* a, const int32_t* order, const float* b, int64_t count, int64_t n,
                        float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const float* x = a + int64_t(order[i]) * n;
    const float* y = b + i * n;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) sum += x[j] * y[j];
    out[i] = sum;
  }
}

// Eight columns at a time; a row's tail is padded with zeros, which stay finite through the math.
template <class Body>
void for_each_lane_block(int64_t n, const Body& body) {
  for (int64_t j = 0; j < n; j += 8) body(j, std::min<int64_t>(8, n - j));
}

void CpuOps::swiglu_forward(const float* gate_up, int64_t rows, int64_t n, Destination out) {
  write_rows(out, rows, n, [&](int64_t r, float* row) {
    const float* gate = gate_up + r * 2 * n;
    const float* up = gate + n;
    for_each_lane_block(n, [&](int64_t j, int64_t width) {
      const Float8 g = load_partial(gate + j, width, 0.0f), u = load_partial(up + j, width, 0.0f);
      store_partial(row + j, g * vsigmoid(g) * u, width);
    });
  });
}

// out = silu(g) u: d up = d silu(g), d gate = d u sigmoid(g) (1 + g (1 - sigmoid(g))).
void CpuOps::swiglu_backward(const float* gate_up, const float* dout, int64_t rows, int64_t n,
                             Destination dgate_up) {
  write_rows(dgate_up, rows, 2 * n, [&](int64_t r, float* row) {
    const float* gate = gate_up + r * 2 * n;
    const float* up = gate + n;
    float* dgate = row;
    float* dup = row + n;
    for_each_lane_block(n, [&](int64_t j, int64_t width) {
      const Float8 g = load_partial(gate + j, width, 0.0f), u = load_partial(up + j, width, 0.0f);
      const Float8 d = load_partial(dout + r * n + j, width, 0.0f);
      const Float8 sig = vsigmoid(g);
      store_partial(dup + j, d * g * sig, width);
      store_partial(dgate + j, d * u * sig * (1.0f + g * (1.0f - sig)), width);
    });
  });
}

}  // namespace zaya
