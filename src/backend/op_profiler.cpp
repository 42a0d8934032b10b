#include "backend/op_profiler.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "backend/ops.h"
#include "core/error.h"

namespace zaya {
namespace {

// The rows of a profile by name, shared by the ops and their memory.
class Rows {
 public:
  // Runs `call` between two waits for `device` and adds its time to the row `name`.
  template <typename Call>
  void time(Ops& device, const std::string& name, double flops, Call&& call) {
    device.synchronize();
    const auto start = std::chrono::steady_clock::now();
    call();
    device.synchronize();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    OpTime& row = rows_[name];
    row.name = name;
    ++row.calls;
    row.seconds += elapsed.count();
    row.flops += flops;
  }

  void clear() { rows_.clear(); }

  std::vector<OpTime> sorted() const {
    std::vector<OpTime> out;
    for (const auto& [name, row] : rows_) out.push_back(row);
    std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
    return out;
  }

 private:
  std::map<std::string, OpTime> rows_;
};

// The backend's memory, timed: allocation is where a device runtime can stall a step.
class TimingMemory final : public MemoryResource {
 public:
  TimingMemory(MemoryResource& inner, Ops& device, Rows& rows)
      : inner_(inner), device_(device), rows_(rows) {}

  void* allocate(size_t bytes) override {
    void* data = nullptr;
    rows_.time(device_, "memory: allocate", 0, [&] { data = inner_.allocate(bytes); });
    return data;
  }
  // Not timed: a release must not throw, and waiting for the device can.
  void release(void* data) noexcept override { inner_.release(data); }
  void zero(void* data, size_t bytes) override {
    rows_.time(device_, "memory: zero", 0, [&] { inner_.zero(data, bytes); });
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    rows_.time(device_, "memory: copy from host", 0, [&] { inner_.copy_from_host(dst, src, bytes); });
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    rows_.time(device_, "memory: copy to host", 0, [&] { inner_.copy_to_host(dst, src, bytes); });
  }

 private:
  MemoryResource& inner_;
  Ops& device_;
  Rows& rows_;
};

// Each op of the table by its place in it (kOpNames' index), so that a row can be chosen per op at compile
// time.
enum class OpId : size_t {
#define ZAYA_OP(name, params, args) name,
#include "backend/op_table.h"
};

// A row of the profile and the FLOPs one call adds to it.
struct RowKey {
  std::string name;
  double flops = 0;
};

// A product's row names its precision, transposes and shape, since a step's products of different shapes
// run at different rates; the rest of its arguments do not matter.
template <class... Rest>
RowKey product_row(Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                   const Rest&...) {
  return {cat("gemm ", precision == Precision::BF16 ? "bf16 " : "f32 ", trans_a == Trans::Yes ? "A^T " : "A ",
              trans_b == Trans::Yes ? "B^T " : "B ", m, "x", n, "x", k),
          2.0 * double(m) * double(n) * double(k)};
}

// RoPE runs forward in the forward pass and inverse in the backward pass: one row each.
RowKey rope_row(float*, int64_t, int64_t, int64_t, int64_t, int64_t, const float*, const float*,
                bool inverse) {
  return {inverse ? "rope inverse" : "rope"};
}

// The row a call of `op` is timed under: its name, but for the products and RoPE.
template <OpId op, class... Args>
RowKey row(const Args&... args) {
  if constexpr (op == OpId::gemm) {
    return product_row(args...);
  } else if constexpr (op == OpId::rope) {
    return rope_row(args...);
  } else {
    return {std::string(kOpNames[size_t(op)])};
  }
}

}  // namespace

// Every op of the table, timed under its own name, then forwarded.
class OpProfiler::TimingOps final : public Ops {
 public:
  explicit TimingOps(Ops& inner) : inner_(inner), memory_(inner.memory(), inner, rows_) {}

  std::vector<OpTime> times() const { return rows_.sorted(); }
  void clear() { rows_.clear(); }

  MemoryResource& memory() override { return memory_; }
  void synchronize() override { inner_.synchronize(); }
  int64_t rate_probe_size() const override { return inner_.rate_probe_size(); }
  int64_t loss_chunk_logits(bool f32_gradients) const override {
    return inner_.loss_chunk_logits(f32_gradients);
  }
  int64_t loss_gradient_logits() const override { return inner_.loss_gradient_logits(); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    time("copy from host", [&] { inner_.copy_from_host(dst, src, bytes); });
  }
  void zero(void* data, size_t bytes) override {
    time("zero", [&] { inner_.zero(data, bytes); });
  }

  bool fast_bf16() const override { return inner_.fast_bf16(); }
  int64_t cca_conv_scratch(const AttentionShape& shape, int64_t k0, int64_t k1) override {
    return inner_.cca_conv_scratch(shape, k0, k1);
  }

  using Ops::gemm;  // the f32 shorthand, which the override below would otherwise hide
#define ZAYA_OP(name, params, args)                        \
  void name params override {                              \
    time(row<OpId::name> args, [&] { inner_.name args; }); \
  }
#include "backend/op_table.h"

 protected:
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    time("read to host", [&] { inner_.read_to_host(dst, src, bytes); });
  }

 private:
  template <typename Call>
  void time(const char* name, Call&& call) {
    rows_.time(inner_, name, 0, call);
  }
  template <typename Call>
  void time(const RowKey& row, Call&& call) {
    rows_.time(inner_, row.name, row.flops, call);
  }

  Ops& inner_;
  Rows rows_;
  TimingMemory memory_;
};

OpProfiler::OpProfiler(Ops& inner) : timing_(std::make_unique<TimingOps>(inner)) {}
OpProfiler::~OpProfiler() = default;

Ops& OpProfiler::ops() {
  return *timing_;
}

std::vector<OpTime> OpProfiler::times() const {
  return timing_->times();
}

void OpProfiler::clear() {
  timing_->clear();
}

}  // namespace zaya
