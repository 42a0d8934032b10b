#pragma once
// What the op check's calls are made of (op_check.h): a call's arrays, placed on each backend from the same
// values, and the call itself, written once for both; the model's sizes under the names the calls use. The
// calls of each op family are in backend/op_check/<family>.cpp, one function per family of op_table.h.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/op_check.h"
#include "backend/ops.h"
#include "core/buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"

namespace zaya::op_check {

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

// A handle to an activation output, which the op writes to a Destination (ops.h): bf16 in a bf16 check, as
// a bf16 run's products read it, else f32.
struct Activation {
  size_t index = 0;
  bool bf16 = false;
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
  Destination operator()(Activation array) const {
    if (array.bf16) return static_cast<BFloat16*>(pointers_[array.index]);
    return static_cast<float*>(pointers_[array.index]);
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
  // An activation output (Destination), in bf16 when `precision` is.
  Activation activation(const char* name, int64_t count, Precision precision) {
    if (precision == Precision::BF16) return {output<BFloat16>(name, count).index, true};
    return {output<float>(name, count).index, false};
  }
  // An activation the op updates in place, from random values of [-1, 1) (rounded to bf16 in a bf16 check).
  Activation updated_activation(const char* name, int64_t count, Precision precision) {
    if (precision != Precision::BF16) return {updated(name, count).index, false};
    std::vector<BFloat16> start(static_cast<size_t>(count));
    const std::vector<float> values = random(count);
    for (size_t i = 0; i < start.size(); ++i) start[i].bits = f32_to_bf16(values[i]);
    return {updated(name, start).index, true};
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

// "[2,70,64]": a call's shapes, as its description names them.
std::string dims(std::initializer_list<int64_t> sizes);

// ", bf16 output" in a bf16 check, for a call writing an Activation; empty otherwise.
inline const char* bf16_output(const Sizes& s) {
  return s.precision == Precision::BF16 ? ", bf16 output" : "";
}

// A padded batch's mask [B, S] (1 keep): sequence 0 drops scattered keys, sequence 1 (where there is one)
// its first six positions, left padding, so that its first rows see no key at all.
std::vector<float> padding_mask(int64_t batch, int64_t seq);

// One call of an op as check_ops lists it: described at once, its arrays built only when its turn comes.
struct CallSpec {
  const char* op;
  std::string call;
  std::function<void(Call&)> build;  // its arrays and the call itself
};

// Appends a call of `op`, described as `call`.
void add(std::vector<CallSpec>& calls, const char* op, std::string call, std::function<void(Call&)> build);

// The calls of each family, appended to `calls` in the table's order: <family>_calls in
// backend/op_check/<family>.cpp.
#define ZAYA_FAMILY(family) void family##_calls(const Sizes& s, std::vector<CallSpec>& calls);
#define ZAYA_OP(name, params, args)
#include "backend/op_table.h"

}  // namespace zaya::op_check
