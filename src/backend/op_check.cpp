#include "backend/op_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "core/buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"

namespace zaya {
namespace {

// ---- a call's arrays ---------------------------------------------------------------------------------

enum class Kind : uint8_t { F32, BF16, I32, I64, F64 };

template <class T>
constexpr Kind kind_of() {
  if constexpr (std::is_same_v<T, float>) return Kind::F32;
  if constexpr (std::is_same_v<T, BFloat16>) return Kind::BF16;
  if constexpr (std::is_same_v<T, int32_t>) return Kind::I32;
  if constexpr (std::is_same_v<T, int64_t>) return Kind::I64;
  if constexpr (std::is_same_v<T, double>) return Kind::F64;
}

size_t kind_size(Kind kind) {
  switch (kind) {
    case Kind::BF16:
      return 2;
    case Kind::F32:
    case Kind::I32:
      return 4;
    case Kind::I64:
    case Kind::F64:
      return 8;
  }
  return 1;
}

template <class T>
T load(const unsigned char* at, size_t i) {
  T value;
  std::memcpy(&value, at + i * sizeof value, sizeof value);
  return value;
}

// Element i of host bytes of `kind`, as a double (exactly: bf16, f32, and integers below 2^53).
double element(const std::vector<unsigned char>& bytes, Kind kind, size_t i) {
  const unsigned char* at = bytes.data();
  switch (kind) {
    case Kind::F32:
      return load<float>(at, i);
    case Kind::BF16:
      return bf16_to_f32(load<uint16_t>(at, i));
    case Kind::I32:
      return load<int32_t>(at, i);
    case Kind::I64:
      return double(load<int64_t>(at, i));
    case Kind::F64:
      return load<double>(at, i);
  }
  return 0;
}

// One array an op takes.
struct ArraySpec {
  std::string name;
  std::vector<unsigned char> host;  // the values both backends start from (released once both have them)
  size_t bytes = 0;
  Kind kind = Kind::F32;
  bool compared = false;  // an output: overwritten, accumulated or updated in place
  bool saved = false;     // written by the call's `prepare` on the reference, then the same input of both
  std::function<int64_t(Ops&)> scratch_floats;  // working memory each backend sizes for itself
};

// A typed handle to a call's array.
template <class T>
struct Array {
  size_t index = 0;
};

// A call's arrays in one backend's memory.
class Placed {
 public:
  Placed(Ops& ops, const std::vector<ArraySpec>& arrays) : ops_(ops) {
    for (const ArraySpec& a : arrays) {
      const size_t bytes = a.scratch_floats ? size_t(a.scratch_floats(ops)) * sizeof(float) : a.bytes;
      // Never empty: an empty array (no routed token) still passes a pointer, which an op may read as given.
      buffers_.emplace_back(std::max(bytes, kAlignment), ops.memory());
      pointers_.push_back(buffers_.back().data());
    }
    fill(arrays);
  }
  // Every array but the scratch to its host values (again, after `prepare` wrote some of them).
  void fill(const std::vector<ArraySpec>& arrays) {
    for (size_t i = 0; i < arrays.size(); ++i) {
      if (!arrays[i].host.empty())
        ops_.copy_from_host(buffers_[i].data(), arrays[i].host.data(), arrays[i].host.size());
    }
  }
  std::vector<unsigned char> read(const ArraySpec& array, size_t index) const {
    std::vector<unsigned char> bytes(array.bytes);
    if (!bytes.empty()) ops_.read_to_host(bytes.data(), pointers_[index], bytes.size());
    return bytes;
  }
  // The array's pointer in this backend's memory, for the op's call.
  template <class T>
  T* operator()(Array<T> array) const {
    return static_cast<T*>(pointers_[array.index]);
  }

 private:
  Ops& ops_;
  std::vector<AlignedBuffer> buffers_;
  std::vector<void*> pointers_;  // buffers_'s data
};

using Run = std::function<void(Ops&, const Placed&)>;

// One call of one op: its arrays (with their starting values) and the call itself, written once for both
// backends. Random values come from one counter-based stream per call, so a call's inputs do not depend
// on the calls before it.
class Call {
 public:
  Call(std::string op, std::string call, uint64_t seed, uint64_t index)
      : op_(std::move(op)), call_(std::move(call)), rng_(seed, RngPurpose::Test, index) {}

  // Values uniform in [-scale, scale), for an input or to make one from.
  std::vector<float> random(int64_t count, float scale = 1.0f) {
    std::vector<float> values(static_cast<size_t>(count));
    for (float& value : values) value = scale * (2.0f * rng_.uniform(next_++) - 1.0f);
    return values;
  }
  Array<float> uniform(const char* name, int64_t count, float scale = 1.0f) {
    return input(name, random(count, scale));
  }
  template <class T>
  Array<T> input(const char* name, const std::vector<T>& values) {
    return add<T>(name, values, false, false);
  }
  // An output the op overwrites. It starts from the same random values on both sides, so an element one
  // backend leaves unwritten and the other writes shows as an error, and one the op must leave alone is
  // compared as well.
  template <class T = float>
  Array<T> output(const char* name, int64_t count) {
    return add<T>(name, garbage<T>(count), true, false);
  }
  // An output the op adds to, or updates in place: it starts from the same values on both sides.
  Array<float> updated(const char* name, int64_t count, float scale = 1.0f) {
    return add<float>(name, random(count, scale), true, false);
  }
  template <class T>
  Array<T> updated(const char* name, const std::vector<T>& start) {
    return add<T>(name, start, true, false);
  }
  // An input the reference's forward op writes in `prepare` (what a forward pass saves for its backward).
  template <class T = float>
  Array<T> saved(const char* name, int64_t count) {
    return add<T>(name, garbage<T>(count), false, true);
  }
  // Working memory each backend sizes itself.
  Array<float> scratch(const char* name, std::function<int64_t(Ops&)> floats) {
    ArraySpec spec;
    spec.name = name;
    spec.scratch_floats = std::move(floats);
    arrays_.push_back(std::move(spec));
    return {arrays_.size() - 1};
  }
  void prepare(Run run) { prepare_ = std::move(run); }
  void run(Run run) { run_ = std::move(run); }

  OpCheckResult check(Ops& reference, Ops& device, const OpCheckOptions& options);

 private:
  template <class T>
  std::vector<T> garbage(int64_t count) {
    std::vector<T> values(static_cast<size_t>(count));
    for (T& value : values) {
      const float drawn = 2.0f * rng_.uniform(next_++) - 1.0f;
      if constexpr (std::is_same_v<T, BFloat16>) {
        value.bits = f32_to_bf16(drawn);
      } else if constexpr (std::is_floating_point_v<T>) {
        value = T(drawn);
      } else {
        value = T(-7);  // no index, count or offset is negative
      }
    }
    return values;
  }
  template <class T>
  Array<T> add(const char* name, const std::vector<T>& values, bool compared, bool saved) {
    ArraySpec spec;
    spec.name = name;
    spec.kind = kind_of<T>();
    spec.bytes = values.size() * sizeof(T);
    spec.host.resize(spec.bytes);
    if (!values.empty()) std::memcpy(spec.host.data(), values.data(), spec.bytes);
    spec.compared = compared;
    spec.saved = saved;
    arrays_.push_back(std::move(spec));
    return {arrays_.size() - 1};
  }
  void call_on(Ops& ops, const Placed& placed, const Run& run, const char* side) const {
    try {
      run(ops, placed);
    } catch (const Error& e) {
      throw Error(cat(op_, " (", call_, ") on the ", side, ": ", e.what()));
    }
  }
  double median_seconds(Ops& ops, const Placed& placed, int repeats, const char* side) const;

  std::string op_, call_;
  RandomStream rng_;
  uint64_t next_ = 0;
  std::vector<ArraySpec> arrays_;
  Run prepare_, run_;
};

double Call::median_seconds(Ops& ops, const Placed& placed, int repeats, const char* side) const {
  if (repeats <= 0) return 0;
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    // A GPU queues work and returns: the time is from an idle queue to an idle queue.
    ops.synchronize();
    const auto start = std::chrono::steady_clock::now();
    call_on(ops, placed, run_, side);
    ops.synchronize();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + long(seconds.size() / 2), seconds.end());
  return seconds[seconds.size() / 2];
}

OpCheckResult Call::check(Ops& reference, Ops& device, const OpCheckOptions& options) {
  Placed on_reference(reference, arrays_);
  if (prepare_) {
    const ThreadCountScope threads(options.reference_threads);
    call_on(reference, on_reference, prepare_, "reference (its forward, for the inputs)");
    for (size_t i = 0; i < arrays_.size(); ++i) {
      if (arrays_[i].saved) arrays_[i].host = on_reference.read(arrays_[i], i);
    }
    on_reference.fill(arrays_);  // what prepare wrote elsewhere is an input again
  }
  Placed on_device(device, arrays_);
  for (ArraySpec& array : arrays_) std::vector<unsigned char>().swap(array.host);  // both sides have them

  // The compared run, then the timed ones (which only move the in-place and accumulated values further:
  // their results are not read).
  {
    const ThreadCountScope threads(options.reference_threads);
    call_on(reference, on_reference, run_, "reference");
  }
  {
    const ThreadCountScope threads(options.device_threads);
    call_on(device, on_device, run_, "device");
  }
  OpCheckResult result;
  result.op = op_;
  result.call = call_;
  for (size_t i = 0; i < arrays_.size(); ++i) {
    const ArraySpec& array = arrays_[i];
    if (!array.compared) continue;
    const std::vector<unsigned char> want = on_reference.read(array, i), got = on_device.read(array, i);
    double largest = 0, error = 0;
    const size_t count = array.bytes / kind_size(array.kind);
    for (size_t j = 0; j < count; ++j) {
      const double w = element(want, array.kind, j), g = element(got, array.kind, j);
      if (std::isfinite(w)) largest = std::max(largest, std::abs(w));
      if (std::isnan(w) && std::isnan(g)) continue;
      if (std::isinf(w) && g == w) continue;  // a row that sees no key: -inf on both sides
      const double difference = std::abs(g - w);
      error = std::isnan(difference) ? std::numeric_limits<double>::infinity() : std::max(error, difference);
    }
    const double relative = error == 0    ? 0
                            : largest > 0 ? error / largest
                                          : std::numeric_limits<double>::infinity();
    result.abs_error = std::max(result.abs_error, error);
    if (result.worst_output.empty() || relative > result.rel_error) {
      result.rel_error = relative;
      result.worst_output = array.name;
    }
  }
  result.reference_seconds = median_seconds(reference, on_reference, options.repeats, "reference");
  result.device_seconds = median_seconds(device, on_device, options.repeats, "device");
  return result;
}

// ---- the calls ---------------------------------------------------------------------------------------

// The model's sizes under the names the calls use.
struct Sizes {
  int64_t B, S, T, H, heads, kv_heads, D, QD, KD, C, half_v, k0, k1, rotary, window, R, E, routes, I, V, L;
  double theta;
  float eps;
  int32_t pad;
  Precision precision;

  Sizes(const OpCheckShape& shape, Precision p)
      : B(shape.batch),
        S(shape.seq),
        T(shape.tokens()),
        H(shape.hidden),
        heads(shape.heads),
        kv_heads(shape.kv_heads),
        D(shape.head_dim),
        QD(shape.heads * shape.head_dim),
        KD(shape.kv_heads * shape.head_dim),
        C(QD + KD),
        half_v(KD / 2),
        k0(shape.conv_time0),
        k1(shape.conv_time1),
        rotary(shape.rotary_dim),
        window(shape.window),
        R(shape.router),
        E(shape.experts),
        routes(shape.experts + 1),
        I(shape.intermediate),
        V(shape.vocab),
        L(shape.loss_rows > 0 ? std::min(shape.loss_rows, T) : T),
        theta(shape.rope_theta),
        eps(shape.rms_eps),
        pad(shape.pad_token_id),
        precision(p) {}
  // The optimizer's ops run over one layer's expert gate_up weights [E, 2I, H]: what Muon steps at once.
  int64_t optimizer_count() const { return E * 2 * I * H; }
  AttentionShape attention(int64_t attention_window) const {
    return {B, S, heads, kv_heads, D, attention_window};
  }
};

std::string dims(std::initializer_list<int64_t> sizes) {
  std::string out;
  for (const int64_t size : sizes) {
    out += out.empty() ? "[" : ",";
    out += std::to_string(size);
  }
  return out + "]";
}

// A padded batch's mask [B, S] (1 keep): sequence 0 drops scattered keys, sequence 1 (where there is one)
// its first six positions, left padding, so that its first rows see no key at all.
std::vector<float> padding_mask(int64_t batch, int64_t seq) {
  std::vector<float> mask(size_t(batch * seq), 1.0f);
  for (int64_t s = 3; s < seq; s += 5) mask[size_t(s)] = 0.0f;
  for (int64_t s = 0; batch > 1 && s < std::min<int64_t>(6, seq); ++s) mask[size_t(seq + s)] = 0.0f;
  return mask;
}

// Each token's route [T] in [0, experts]: about one in six the skip route (experts).
std::vector<int32_t> random_choices(Call& call, int64_t tokens, int64_t experts) {
  const std::vector<float> draws = call.random(tokens);
  std::vector<int32_t> choice(static_cast<size_t>(tokens));
  for (size_t t = 0; t < choice.size(); ++t) {
    const float u = 0.5f * (draws[t] + 1.0f);  // in [0, 1)
    choice[t] = u < 1.0f / 6 ? int32_t(experts) : std::min(int32_t(experts) - 1, int32_t(u * float(experts)));
  }
  return choice;
}

// The grouping group_by_expert defines: each expert's tokens in increasing order, skip-routed ones left
// out (so it is the input of the data movement ops whatever the backend's group_by_expert does).
std::vector<int32_t> grouped_order(const std::vector<int32_t>& choice, int64_t experts) {
  std::vector<int32_t> order;
  for (int32_t e = 0; e < int32_t(experts); ++e) {
    for (size_t t = 0; t < choice.size(); ++t) {
      if (choice[t] == e) order.push_back(int32_t(t));
    }
  }
  return order;
}

// The router's gate of each token: a probability, 0 for the skip route.
std::vector<float> gates(Call& call, const std::vector<int32_t>& choice, int64_t experts) {
  std::vector<float> gate = call.random(int64_t(choice.size()));
  for (size_t t = 0; t < gate.size(); ++t) gate[t] = choice[t] == experts ? 0.0f : 0.5f * (gate[t] + 1.0f);
  return gate;
}

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

std::vector<BFloat16> to_bf16(const std::vector<float>& values) {
  std::vector<BFloat16> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i].bits = f32_to_bf16(values[i]);
  return out;
}

struct CallSpec {
  const char* op;
  std::string call;
  std::function<void(Call&)> build;  // its arrays and the call itself
};

void add(std::vector<CallSpec>& calls, const char* op, std::string call, std::function<void(Call&)> build) {
  calls.push_back({op, std::move(call), std::move(build)});
}

// Products: the experts' (the most FLOPs of a step) forward, input gradient and weight gradient, the
// weight read as the model reads it (a bf16 run's copy, or the f32 values).
void product_calls(const Sizes& s, std::vector<CallSpec>& calls) {
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

// The token ids [T]: random, every 7th the padding id (where the model has one), whose table row the
// backward skips.
std::vector<int32_t> token_ids(Call& c, const Sizes& s) {
  const std::vector<float> draws = c.random(s.T);
  std::vector<int32_t> ids(static_cast<size_t>(s.T));
  for (size_t t = 0; t < ids.size(); ++t) {
    const int32_t drawn = std::min(int32_t(s.V) - 1, int32_t(0.5f * (draws[t] + 1.0f) * float(s.V)));
    ids[t] = t % 7 == 0 && s.pad >= 0 ? s.pad : drawn;
  }
  return ids;
}

void embedding_and_norm_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  add(calls, "embedding_forward", cat(dims({s.T}), " ids of ", dims({s.V, s.H})), [s](Call& c) {
    const auto ids = c.input("ids", token_ids(c, s));  // [T]
    const auto table = c.uniform("table", s.V * s.H);  // [V, H]
    const auto bias = c.uniform("bias", s.H);          // [H]
    const auto scale = c.uniform("scale", s.H);        // [H]
    const auto out = c.output("out", s.T * s.H);       // [T, H]
    c.run([=](Ops& ops, const Placed& a) {
      ops.embedding_forward(a(ids), s.T, a(table), s.H, a(bias), a(scale), a(out));
    });
  });
  add(calls, "embedding_backward", cat(dims({s.T}), " ids into ", dims({s.V, s.H}), ", padding skipped"),
      [s](Call& c) {
        const auto ids = c.input("ids", token_ids(c, s));    // [T]
        const auto table = c.uniform("table", s.V * s.H);    // [V, H]
        const auto bias = c.uniform("bias", s.H);            // [H]
        const auto scale = c.uniform("scale", s.H);          // [H]
        const auto dout = c.uniform("dout", s.T * s.H);      // [T, H]
        const auto dtable = c.updated("dtable", s.V * s.H);  // [V, H], accumulated
        const auto dbias = c.updated("dbias", s.H);          // [H], accumulated
        const auto dscale = c.updated("dscale", s.H);        // [H], accumulated
        c.run([=](Ops& ops, const Placed& a) {
          ops.embedding_backward(a(ids), s.T, a(table), s.H, a(bias), a(scale), a(dout), s.pad, a(dtable),
                                 a(dbias), a(dscale));
        });
      });
  add(calls, "rmsnorm_forward", dims({s.T, s.H}), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.H, 3.0f);  // [T, H]
    const auto weight = c.uniform("weight", s.H);    // [H]
    const auto y = c.output("y", s.T * s.H);         // [T, H]
    const auto rstd = c.output("rstd", s.T);         // [T]
    c.run([=](Ops& ops, const Placed& a) {
      ops.rmsnorm_forward(a(x), a(weight), s.T, s.H, s.eps, a(y), a(rstd));
    });
  });
  add(calls, "rmsnorm_backward", cat(dims({s.T, s.H}), ", dx accumulated"), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.H, 3.0f);                  // [T, H]
    const auto weight = c.uniform("weight", s.H);                    // [H]
    const auto rstd = c.saved("rstd", s.T);                          // [T]
    const auto y = c.scratch("y", [s](Ops&) { return s.T * s.H; });  // [T, H], unused
    const auto dy = c.uniform("dy", s.T * s.H);                      // [T, H]
    const auto dx = c.updated("dx", s.T * s.H);                      // [T, H], accumulated
    const auto dweight = c.updated("dweight", s.H);                  // [H], accumulated
    c.prepare([=](Ops& ops, const Placed& a) {
      ops.rmsnorm_forward(a(x), a(weight), s.T, s.H, s.eps, a(y), a(rstd));
    });
    c.run([=](Ops& ops, const Placed& a) {
      ops.rmsnorm_backward(a(x), a(weight), a(rstd), a(dy), s.T, s.H, a(dx), true, a(dweight));
    });
  });
  add(calls, "residual_scale_forward", dims({s.T, s.H}), [s](Call& c) {
    const auto h = c.uniform("h", s.T * s.H), r = c.uniform("r", s.T * s.H);  // [T, H]
    const auto h_bias = c.uniform("h_bias", s.H), h_scale = c.uniform("h_scale", s.H),
               r_bias = c.uniform("r_bias", s.H), r_scale = c.uniform("r_scale", s.H);  // [H]
    const auto out = c.output("out", s.T * s.H);                                        // [T, H]
    c.run([=](Ops& ops, const Placed& a) {
      ops.residual_scale_forward(a(h), a(r), a(h_bias), a(h_scale), a(r_bias), a(r_scale), s.T, s.H, a(out));
    });
  });
  add(calls, "residual_scale_backward", dims({s.T, s.H}), [s](Call& c) {
    const auto h = c.uniform("h", s.T * s.H), r = c.uniform("r", s.T * s.H);  // [T, H]
    const auto h_bias = c.uniform("h_bias", s.H), h_scale = c.uniform("h_scale", s.H),
               r_bias = c.uniform("r_bias", s.H), r_scale = c.uniform("r_scale", s.H);  // [H]
    const auto dout = c.uniform("dout", s.T * s.H);                                     // [T, H]
    const auto dh = c.output("dh", s.T * s.H), dr = c.output("dr", s.T * s.H);          // [T, H]
    const auto dh_bias = c.updated("dh_bias", s.H), dh_scale = c.updated("dh_scale", s.H),
               dr_bias = c.updated("dr_bias", s.H),
               dr_scale = c.updated("dr_scale", s.H);  // [H], accumulated
    c.run([=](Ops& ops, const Placed& a) {
      ops.residual_scale_backward(a(h), a(r), a(h_bias), a(h_scale), a(r_bias), a(r_scale), a(dout), s.T, s.H,
                                  a(dh), a(dr), a(dh_bias), a(dh_scale), a(dr_bias), a(dr_scale));
    });
  });
}

void elementwise_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  add(calls, "gelu_forward", cat("router MLP ", dims({s.T, s.R})), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.R, 4.0f);  // [T, R]
    const auto y = c.output("y", s.T * s.R);         // [T, R]
    c.run([=](Ops& ops, const Placed& a) { ops.gelu_forward(a(x), s.T * s.R, a(y)); });
  });
  add(calls, "gelu_backward", cat("router MLP ", dims({s.T, s.R})), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.R, 4.0f);  // [T, R]
    const auto dy = c.uniform("dy", s.T * s.R);      // [T, R]
    const auto dx = c.output("dx", s.T * s.R);       // [T, R]
    c.run([=](Ops& ops, const Placed& a) { ops.gelu_backward(a(x), a(dy), s.T * s.R, a(dx)); });
  });
  add(calls, "fill", dims({s.T, s.H}), [s](Call& c) {
    const auto x = c.output("x", s.T * s.H);  // [T, H]
    c.run([=](Ops& ops, const Placed& a) { ops.fill(a(x), s.T * s.H, -2.5f); });
  });
  add(calls, "mask_rows", cat(dims({s.T, s.H}), ", padded rows"), [s](Call& c) {
    const auto x = c.updated("x", s.T * s.H);                   // [T, H], in place
    const auto mask = c.input("mask", padding_mask(s.B, s.S));  // [T]
    c.run([=](Ops& ops, const Placed& a) { ops.mask_rows(a(x), s.T, s.H, a(mask)); });
  });
  // The convolution's q columns added onto the q-k mean's q (the model's q before its norm).
  add(calls, "copy_rows", cat(dims({s.T, s.QD}), " of ", dims({s.T, s.C}), " added"), [s](Call& c) {
    const auto src = c.uniform("src", s.T * s.C);   // [T, C]
    const auto dst = c.updated("dst", s.T * s.QD);  // [T, QD], accumulated
    c.run([=](Ops& ops, const Placed& a) { ops.copy_rows(a(src), s.C, s.T, s.QD, a(dst), s.QD, true); });
  });
  // The values' delayed half: the second half of each row of v [T, KD].
  add(calls, "delay_forward", cat(dims({s.B, s.S, s.half_v}), " into ", dims({s.T, s.KD})), [s](Call& c) {
    const auto src = c.uniform("src", s.T * s.half_v);  // [B, S, KD / 2]
    const auto first = c.uniform("first", s.half_v);    // [KD / 2]
    const auto v = c.output("v", s.T * s.KD);           // [T, KD]
    c.run([=](Ops& ops, const Placed& a) {
      ops.delay_forward(a(src), a(first), s.B, s.S, s.half_v, a(v) + s.half_v, s.KD);
    });
  });
  add(calls, "delay_backward", cat(dims({s.T, s.KD}), " into ", dims({s.B, s.S, s.half_v})), [s](Call& c) {
    const auto dv = c.uniform("dv", s.T * s.KD);         // [T, KD]
    const auto dsrc = c.output("dsrc", s.T * s.half_v);  // [B, S, KD / 2]
    const auto dfirst = c.updated("dfirst", s.half_v);   // [KD / 2], accumulated
    c.run([=](Ops& ops, const Placed& a) {
      ops.delay_backward(a(dv) + s.half_v, s.KD, s.B, s.S, s.half_v, a(dsrc), a(dfirst));
    });
  });
  // The router's depth averaging: the previous layer's state times router_states_scale.
  add(calls, "add_scaled", cat("router state ", dims({s.T, s.R})), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.R);    // [T, R]
    const auto scale = c.uniform("scale", s.R);  // [R]
    const auto y = c.updated("y", s.T * s.R);    // [T, R], accumulated
    c.run([=](Ops& ops, const Placed& a) { ops.add_scaled(a(x), a(scale), s.T, s.R, a(y)); });
  });
  add(calls, "add_scaled_backward", cat("router state ", dims({s.T, s.R})), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.R);      // [T, R]
    const auto scale = c.uniform("scale", s.R);    // [R]
    const auto dy = c.uniform("dy", s.T * s.R);    // [T, R]
    const auto dx = c.output("dx", s.T * s.R);     // [T, R]
    const auto dscale = c.updated("dscale", s.R);  // [R], accumulated
    c.run([=](Ops& ops, const Placed& a) {
      ops.add_scaled_backward(a(x), a(scale), a(dy), s.T, s.R, a(dx), a(dscale));
    });
  });
}

void cca_calls(const Sizes& s, std::vector<CallSpec>& calls) {
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

// Attention of a full causal layer and, where the model has one, of a sliding-window layer, on a padded
// batch (rows that see no key included).
void attention_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const float scale = 1.0f / std::sqrt(float(s.D));
  std::vector<int64_t> windows = {0};
  if (s.window > 0) windows.push_back(s.window);
  const auto layer = [](int64_t window) { return window > 0 ? cat("window ", window, ", ") : "causal, "; };
  const std::string sizes =
      cat("q ", dims({s.B, s.S, s.heads, s.D}), ", kv ", dims({s.B, s.S, s.kv_heads, s.D}),
          s.precision == Precision::BF16 ? ", bf16" : "");
  for (const int64_t window : windows) {
    const AttentionShape shape = s.attention(window);
    add(calls, "attention_forward", layer(window) + sizes, [s, shape, scale](Call& c) {
      // q spread so that the scores span a few units: a softmax far from uniform.
      const auto q = c.uniform("q", s.T * s.QD, 2.0f);                // [B, S, heads, D]
      const auto k = c.uniform("k", s.T * s.KD);                      // [B, S, KV, D]
      const auto v = c.uniform("v", s.T * s.KD);                      // [B, S, KV, D]
      const auto mask = c.input("key_mask", padding_mask(s.B, s.S));  // [B, S]
      const auto o = c.output("o", s.T * s.QD);                       // [B, S, heads, D]
      const auto lse = c.output("lse", s.T * s.heads);                // [B, heads, S]
      c.run([=](Ops& ops, const Placed& a) {
        ops.attention_forward(s.precision, a(q), a(k), a(v), a(mask), shape, scale, a(o), a(lse));
      });
    });
  }
  for (const int64_t window : windows) {
    const AttentionShape shape = s.attention(window);
    add(calls, "attention_backward", layer(window) + sizes, [s, shape, scale](Call& c) {
      const auto q = c.uniform("q", s.T * s.QD, 2.0f);                // [B, S, heads, D]
      const auto k = c.uniform("k", s.T * s.KD);                      // [B, S, KV, D]
      const auto v = c.uniform("v", s.T * s.KD);                      // [B, S, KV, D]
      const auto mask = c.input("key_mask", padding_mask(s.B, s.S));  // [B, S]
      const auto o = c.saved("o", s.T * s.QD);                        // [B, S, heads, D]
      const auto lse = c.saved("lse", s.T * s.heads);                 // [B, heads, S]
      const auto dout = c.uniform("dout", s.T * s.QD);                // [B, S, heads, D]
      const auto dq = c.output("dq", s.T * s.QD);                     // [B, S, heads, D]
      const auto dk = c.output("dk", s.T * s.KD);                     // [B, S, KV, D]
      const auto dv = c.output("dv", s.T * s.KD);                     // [B, S, KV, D]
      c.prepare([=](Ops& ops, const Placed& a) {
        ops.attention_forward(s.precision, a(q), a(k), a(v), a(mask), shape, scale, a(o), a(lse));
      });
      c.run([=](Ops& ops, const Placed& a) {
        ops.attention_backward(s.precision, a(q), a(k), a(v), a(mask), a(o), a(lse), a(dout), shape, scale,
                               a(dq), a(dk), a(dv));
      });
    });
  }
  // One new token of each of B sequences against its own cache, of S positions or fewer (the lengths
  // differ); decode is f32 whatever the precision.
  for (const int64_t window : windows) {
    const AttentionShape shape{s.B, 1, s.heads, s.kv_heads, s.D, window};
    add(calls, "attention_decode",
        cat(layer(window), "q ", dims({s.B, s.heads, s.D}), ", caches ", dims({s.B, s.S, s.kv_heads, s.D})),
        [s, shape, scale](Call& c) {
          const auto q = c.uniform("q", s.B * s.QD, 2.0f);      // [B, heads, D]
          const auto keys = c.uniform("keys", s.T * s.KD);      // [B, S, KV, D]
          const auto values = c.uniform("values", s.T * s.KD);  // [B, S, KV, D]
          const auto out = c.output("out", s.B * s.QD);         // [B, heads, D]
          c.run([=](Ops& ops, const Placed& a) {
            std::vector<const float*> key_caches, value_caches;  // [B]
            std::vector<int64_t> lengths;                        // [B]
            for (int64_t b = 0; b < s.B; ++b) {
              key_caches.push_back(a(keys) + b * s.S * s.KD);
              value_caches.push_back(a(values) + b * s.S * s.KD);
              lengths.push_back(std::max<int64_t>(1, s.S - 3 * b));
            }
            ops.attention_decode(a(q), key_caches.data(), value_caches.data(), lengths.data(), shape, scale,
                                 a(out));
          });
        });
  }
}

// The router's logits [T, routes] (spread, so that the choices are clear) and balancing biases [routes].
struct RouterInputs {
  Array<float> logits, biases;
};

RouterInputs router_inputs(Call& c, const Sizes& s) {
  return {c.uniform("logits", s.T * s.routes, 3.0f), c.uniform("biases", s.routes, 0.05f)};
}

void routing_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const std::string logits = dims({s.T, s.routes});
  add(calls, "route_top1", logits, [s](Call& c) {
    const RouterInputs in = router_inputs(c, s);
    const auto probs = c.output("probs", s.T * s.routes);  // [T, routes]
    const auto choice = c.output<int32_t>("choice", s.T);  // [T]
    const auto gate = c.output("gate", s.T);               // [T]
    const auto lse = c.output("lse", s.T);                 // [T]
    c.run([=](Ops& ops, const Placed& a) {
      ops.route_top1(a(in.logits), a(in.biases), s.T, s.routes, a(probs), a(choice), a(gate), a(lse));
    });
  });
  add(calls, "route_top1_backward", logits, [s](Call& c) {
    const RouterInputs in = router_inputs(c, s);
    const auto probs = c.saved("probs", s.T * s.routes);             // [T, routes]
    const auto choice = c.saved<int32_t>("choice", s.T);             // [T]
    const auto gate = c.scratch("gate", [s](Ops&) { return s.T; });  // [T], unused
    const auto lse = c.scratch("lse", [s](Ops&) { return s.T; });    // [T], unused
    const auto dgate = c.uniform("dgate", s.T);                      // [T]
    const auto dlogits = c.output("dlogits", s.T * s.routes);        // [T, routes]
    c.prepare([=](Ops& ops, const Placed& a) {
      ops.route_top1(a(in.logits), a(in.biases), s.T, s.routes, a(probs), a(choice), a(gate), a(lse));
    });
    c.run([=](Ops& ops, const Placed& a) {
      ops.route_top1_backward(a(probs), a(choice), a(dgate), s.T, s.routes, a(dlogits));
    });
  });
  add(calls, "router_statistics", cat(logits, ", accumulated"), [s](Call& c) {
    const RouterInputs in = router_inputs(c, s);
    const auto probs = c.saved("probs", s.T * s.routes);             // [T, routes]
    const auto choice = c.saved<int32_t>("choice", s.T);             // [T]
    const auto lse = c.saved("lse", s.T);                            // [T]
    const auto gate = c.scratch("gate", [s](Ops&) { return s.T; });  // [T], unused
    // Accumulated onto earlier micro-batches' sums.
    const auto counts = c.updated("counts", std::vector<int64_t>(size_t(s.routes), 3));  // [routes]
    const auto prob_sums = c.updated("prob_sums", std::vector<double>(size_t(s.routes), 0.5));
    const auto entropy = c.updated("entropy_sum", std::vector<double>{1.25});
    const auto lse_square = c.updated("lse_square_sum", std::vector<double>{2.5});
    c.prepare([=](Ops& ops, const Placed& a) {
      ops.route_top1(a(in.logits), a(in.biases), s.T, s.routes, a(probs), a(choice), a(gate), a(lse));
    });
    c.run([=](Ops& ops, const Placed& a) {
      ops.router_statistics(a(probs), a(lse), a(choice), s.T, s.routes, a(counts), a(prob_sums), a(entropy),
                            a(lse_square));
    });
  });
  add(calls, "router_aux_backward", cat(logits, ", accumulated"), [s](Call& c) {
    const RouterInputs in = router_inputs(c, s);
    const auto probs = c.saved("probs", s.T * s.routes);             // [T, routes]
    const auto lse = c.saved("lse", s.T);                            // [T]
    const auto choice = c.saved<int32_t>("choice", s.T);             // [T], unused
    const auto gate = c.scratch("gate", [s](Ops&) { return s.T; });  // [T], unused
    const auto route_coef = c.uniform("route_coef", s.routes);       // [routes]
    const auto dlogits = c.updated("dlogits", s.T * s.routes);       // [T, routes], accumulated
    c.prepare([=](Ops& ops, const Placed& a) {
      ops.route_top1(a(in.logits), a(in.biases), s.T, s.routes, a(probs), a(choice), a(gate), a(lse));
    });
    c.run([=](Ops& ops, const Placed& a) {
      ops.router_aux_backward(a(probs), a(lse), s.T, s.routes, a(route_coef), 0.01f, a(dlogits));
    });
  });
  add(calls, "group_by_expert", cat(dims({s.T}), " choices of ", s.routes, " routes"), [s](Call& c) {
    const auto choice = c.input("choice", random_choices(c, s.T, s.E));  // [T]
    const auto order = c.output<int32_t>("order", s.T);                  // [T]
    const auto offsets = c.output<int64_t>("offsets", s.E + 1);          // [E + 1]
    c.run([=](Ops& ops, const Placed& a) { ops.group_by_expert(a(choice), s.T, s.E, a(order), a(offsets)); });
  });
  // The experts' data movement, over the routed tokens (the skip-routed left out).
  add(calls, "gather_rows", cat("routed rows of ", dims({s.T, s.H}), ", gate-scaled"), [s](Call& c) {
    const std::vector<int32_t> choice = random_choices(c, s.T, s.E);
    const auto order_values = grouped_order(choice, s.E);
    const int64_t routed = int64_t(order_values.size());
    const auto src = c.uniform("src", s.T * s.H);              // [T, H]
    const auto order = c.input("order", order_values);         // [routed]
    const auto gate = c.input("gate", gates(c, choice, s.E));  // [T]
    const auto dst = c.output("dst", routed * s.H);            // [routed, H]
    c.run(
        [=](Ops& ops, const Placed& a) { ops.gather_rows(a(src), a(order), a(gate), routed, s.H, a(dst)); });
  });
  add(calls, "scatter_rows", cat("routed rows into ", dims({s.T, s.H}), ", gate-scaled"), [s](Call& c) {
    const std::vector<int32_t> choice = random_choices(c, s.T, s.E);
    const auto order_values = grouped_order(choice, s.E);
    const int64_t routed = int64_t(order_values.size());
    const auto src = c.uniform("src", routed * s.H);           // [routed, H]
    const auto order = c.input("order", order_values);         // [routed]
    const auto gate = c.input("gate", gates(c, choice, s.E));  // [T]
    // Overwritten where routed; the skip-routed rows keep their values.
    const auto dst = c.output("dst", s.T * s.H);  // [T, H]
    c.run([=](Ops& ops, const Placed& a) {
      ops.scatter_rows(a(src), a(order), a(gate), routed, s.H, false, a(dst));
    });
  });
  add(calls, "gather_dot", cat("routed rows of ", dims({s.T, s.H})), [s](Call& c) {
    const std::vector<int32_t> choice = random_choices(c, s.T, s.E);
    const auto order_values = grouped_order(choice, s.E);
    const int64_t routed = int64_t(order_values.size());
    const auto d_moe = c.uniform("a", s.T * s.H);       // [T, H]
    const auto order = c.input("order", order_values);  // [routed]
    const auto y = c.uniform("b", routed * s.H);        // [routed, H]
    const auto out = c.output("out", routed);           // [routed]
    c.run([=](Ops& ops, const Placed& a) { ops.gather_dot(a(d_moe), a(order), a(y), routed, s.H, a(out)); });
  });
  add(calls, "swiglu_forward", dims({s.T, 2 * s.I}), [s](Call& c) {
    const auto gate_up = c.uniform("gate_up", s.T * 2 * s.I, 4.0f);  // [T, 2I]
    const auto out = c.output("out", s.T * s.I);                     // [T, I]
    c.run([=](Ops& ops, const Placed& a) { ops.swiglu_forward(a(gate_up), s.T, s.I, a(out)); });
  });
  add(calls, "swiglu_backward", dims({s.T, 2 * s.I}), [s](Call& c) {
    const auto gate_up = c.uniform("gate_up", s.T * 2 * s.I, 4.0f);  // [T, 2I]
    const auto dout = c.uniform("dout", s.T * s.I);                  // [T, I]
    const auto dgate_up = c.output("dgate_up", s.T * 2 * s.I);       // [T, 2I]
    c.run(
        [=](Ops& ops, const Placed& a) { ops.swiglu_backward(a(gate_up), a(dout), s.T, s.I, a(dgate_up)); });
  });
}

void optimizer_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const int64_t n = s.optimizer_count();
  const std::string experts = cat("experts' ", dims({s.E, 2 * s.I, s.H}));
  add(calls, "sum_squares", experts, [n](Call& c) {
    const auto x = c.uniform("x", n, 2.0f);                        // [n]
    const auto sum = c.updated("sum", std::vector<double>{12.5});  // [1], accumulated
    c.run([=](Ops& ops, const Placed& a) { ops.sum_squares(a(x), n, a(sum)); });
  });
  add(calls, "adamw_step", cat(experts, ", step 3"), [n](Call& c) {
    std::vector<float> second = c.random(n, 0.1f);
    for (float& value : second) value *= value;  // v >= 0
    const auto param = c.updated("param", n);    // [n], in place
    const auto grad = c.uniform("grad", n);      // [n]
    const auto m = c.updated("m", n, 0.1f);      // [n], in place
    const auto v = c.updated("v", second);       // [n], in place
    Ops::AdamWStep step{};
    step.lr = 1e-2f;
    step.beta1 = 0.9f;
    step.beta2 = 0.95f;
    step.eps = 1e-8f;
    step.weight_decay = 0.1f;
    step.grad_scale = 0.5f;
    step.bias_correction1 = 1.0f - std::pow(step.beta1, 3.0f);
    step.bias_correction2 = 1.0f - std::pow(step.beta2, 3.0f);
    c.run([=](Ops& ops, const Placed& a) { ops.adamw_step(a(param), a(grad), a(m), a(v), n, step); });
  });
  add(calls, "momentum_step", cat(experts, ", nesterov"), [n](Call& c) {
    const auto buf = c.updated("buf", n);    // [n], in place
    const auto grad = c.uniform("grad", n);  // [n]
    const auto out = c.output("out", n);     // [n]
    c.run(
        [=](Ops& ops, const Placed& a) { ops.momentum_step(a(buf), a(grad), n, 0.95f, true, 0.5f, a(out)); });
  });
  add(calls, "newton_schulz", cat(experts, ", 5 steps", s.precision == Precision::BF16 ? ", bf16" : ""),
      [s, n](Call& c) {
        const auto x = c.updated("x", n);  // [E, 2I, H], in place
        c.run([=](Ops& ops, const Placed& a) {
          // Muon's quintic (optim/optimizer.h's defaults).
          const float coefficients[3] = {3.4445f, -4.7750f, 2.0315f};
          ops.newton_schulz(s.precision, a(x), s.E, 2 * s.I, s.H, 5, coefficients);
        });
      });
  add(calls, "decay_and_subtract", experts, [n](Call& c) {
    const auto param = c.updated("param", n);    // [n], in place
    const auto update = c.uniform("update", n);  // [n]
    c.run([=](Ops& ops, const Placed& a) { ops.decay_and_subtract(a(param), a(update), n, 1e-3f, 0.02f); });
  });
}

// In bf16 the gradient is written as a bf16 step's head reads it: rounded, with no f32 copy.
void loss_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const bool bf16 = s.precision == Precision::BF16;
  add(calls, "cross_entropy", cat(dims({s.L, s.V}), ", ignored rows", bf16 ? ", bf16 gradient" : ""),
      [s, bf16](Call& c) {
        // Labels in the vocabulary, every 8th row ignored (-100, as padding is).
        const std::vector<float> draws = c.random(s.L);
        std::vector<int32_t> label_values(static_cast<size_t>(s.L));
        for (size_t r = 0; r < label_values.size(); ++r) {
          label_values[r] =
              r % 8 == 1 ? -100 : std::min(int32_t(s.V) - 1, int32_t(0.5f * (draws[r] + 1.0f) * float(s.V)));
        }
        const auto logits = c.uniform("logits", s.L * s.V, 5.0f);           // [L, V]
        const auto labels = c.input("labels", label_values);                // [L]
        const auto loss = c.updated("loss_sum", std::vector<double>{1.5});  // [1], accumulated
        const float grad_scale = 1.0f / float(s.L);
        if (bf16) {
          const auto dlogits = c.output<BFloat16>("dlogits bf16", s.L * s.V);  // [L, V]
          c.run([=](Ops& ops, const Placed& a) {
            ops.cross_entropy(a(logits), a(labels), s.L, s.V, grad_scale, nullptr, a(dlogits), a(loss));
          });
        } else {
          const auto dlogits = c.output("dlogits", s.L * s.V);  // [L, V]
          c.run([=](Ops& ops, const Placed& a) {
            ops.cross_entropy(a(logits), a(labels), s.L, s.V, grad_scale, a(dlogits), nullptr, a(loss));
          });
        }
      });
}

}  // namespace

std::vector<OpCheckResult> check_ops(const OpCheckShape& shape, Ops& reference, Ops& device,
                                     const OpCheckOptions& options) {
  if (shape.batch <= 0 || shape.seq <= 0) {
    throw Error(cat("check_ops needs a batch and a sequence length, got ", shape.batch, " x ", shape.seq));
  }
  const Sizes sizes(shape, options.precision);
  // In the table's order (op_table.h). Each call is built, run and freed before the next, so memory holds one
  // call's arrays.
  std::vector<CallSpec> calls;
  product_calls(sizes, calls);
  embedding_and_norm_calls(sizes, calls);
  elementwise_calls(sizes, calls);
  cca_calls(sizes, calls);
  attention_calls(sizes, calls);
  routing_calls(sizes, calls);
  optimizer_calls(sizes, calls);
  loss_calls(sizes, calls);
  for (const std::string_view op : kOpNames) {
    const bool called =
        std::any_of(calls.begin(), calls.end(), [&](const CallSpec& c) { return c.op == op; });
    if (!called)
      throw Error(cat("check_ops has no call of the op ", op, " (a call goes in its family's file)"));
  }
  std::vector<OpCheckResult> results;
  for (size_t i = 0; i < calls.size(); ++i) {
    Call call(calls[i].op, calls[i].call, options.seed, i);
    calls[i].build(call);
    results.push_back(call.check(reference, device, options));
  }
  return results;
}

}  // namespace zaya
