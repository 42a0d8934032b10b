#include "backend/op_check/call.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/threads.h"

namespace zaya::op_check {
namespace {

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

}  // namespace

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

std::string dims(std::initializer_list<int64_t> sizes) {
  std::string out;
  for (const int64_t size : sizes) {
    out += out.empty() ? "[" : ",";
    out += std::to_string(size);
  }
  return out + "]";
}

std::vector<float> padding_mask(int64_t batch, int64_t seq) {
  std::vector<float> mask(size_t(batch * seq), 1.0f);
  for (int64_t s = 3; s < seq; s += 5) mask[size_t(s)] = 0.0f;
  for (int64_t s = 0; batch > 1 && s < std::min<int64_t>(6, seq); ++s) mask[size_t(seq + s)] = 0.0f;
  return mask;
}

void add(std::vector<CallSpec>& calls, const char* op, std::string call, std::function<void(Call&)> build) {
  calls.push_back({op, std::move(call), std::move(build)});
}

}  // namespace zaya::op_check
