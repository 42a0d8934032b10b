#include "train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "dist/communicator.h"

namespace zaya {
namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int k = 0; k < 8; ++k) crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;  // Castagnoli, reflected
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

uint32_t masked_crc(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Protocol buffer wire format, just what Event, Summary and HistogramProto need.
void varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(char(value | 0x80));
    value >>= 7;
  }
  out.push_back(char(value));
}
void tag(std::string& out, int field, int wire) {
  varint(out, uint64_t(field) << 3 | uint64_t(wire));
}
void fixed64(std::string& out, int field, double value) {
  tag(out, field, 1);
  char bytes[8];
  std::memcpy(bytes, &value, 8);
  out.append(bytes, 8);
}
void fixed32(std::string& out, int field, float value) {
  tag(out, field, 5);
  char bytes[4];
  std::memcpy(bytes, &value, 4);
  out.append(bytes, 4);
}
void bytes(std::string& out, int field, const std::string& value) {
  tag(out, field, 2);
  varint(out, value.size());
  out += value;
}
void packed_doubles(std::string& out, int field, const std::vector<double>& values) {
  std::string packed;
  for (double value : values) {
    char raw[8];
    std::memcpy(raw, &value, 8);
    packed.append(raw, 8);
  }
  bytes(out, field, packed);
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  path_ = dir + "/events.out.tfevents." +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) + "." + host_name() +
          "." + std::to_string(::getpid());
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw Error(cat("cannot create: ", std::strerror(errno))).file(path_);
  std::string first;
  fixed64(first, 1, std::chrono::duration<double>(now).count());
  bytes(first, 3, "brain.Event:2");
  const uint64_t length = first.size();
  const uint32_t length_crc = masked_crc(&length, 8), data_crc = masked_crc(first.data(), first.size());
  std::fwrite(&length, 8, 1, file_);
  std::fwrite(&length_crc, 4, 1, file_);
  std::fwrite(first.data(), 1, first.size(), file_);
  std::fwrite(&data_crc, 4, 1, file_);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write_event(int64_t step, const std::string& summary) {
  std::string event;
  fixed64(event, 1,
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  tag(event, 2, 0);
  varint(event, uint64_t(step));
  bytes(event, 5, summary);
  const uint64_t length = event.size();
  const uint32_t length_crc = masked_crc(&length, 8), data_crc = masked_crc(event.data(), event.size());
  std::fwrite(&length, 8, 1, file_);
  std::fwrite(&length_crc, 4, 1, file_);
  std::fwrite(event.data(), 1, event.size(), file_);
  std::fwrite(&data_crc, 4, 1, file_);
}

void TensorBoardWriter::scalar(const std::string& name, int64_t step, double value) {
  std::string summary_value;
  bytes(summary_value, 1, name);
  fixed32(summary_value, 2, float(value));
  std::string summary;
  bytes(summary, 1, summary_value);
  write_event(step, summary);
}

void TensorBoardWriter::bars(const std::string& name, int64_t step, const std::vector<int64_t>& counts) {
  std::string histogram;
  double num = 0, sum = 0, sum_squares = 0;
  std::vector<double> limits, buckets;
  for (size_t i = 0; i < counts.size(); ++i) {
    num += double(counts[i]);
    sum += double(i) * double(counts[i]);
    sum_squares += double(i) * double(i) * double(counts[i]);
    limits.push_back(double(i) + 0.5);
    buckets.push_back(double(counts[i]));
  }
  fixed64(histogram, 1, 0.0);
  fixed64(histogram, 2, counts.empty() ? 0.0 : double(counts.size() - 1));
  fixed64(histogram, 3, num);
  fixed64(histogram, 4, sum);
  fixed64(histogram, 5, sum_squares);
  packed_doubles(histogram, 6, limits);
  packed_doubles(histogram, 7, buckets);
  std::string summary_value;
  bytes(summary_value, 1, name);
  bytes(summary_value, 5, histogram);
  std::string summary;
  bytes(summary, 1, summary_value);
  write_event(step, summary);
}

void TensorBoardWriter::flush() {
  std::fflush(file_);
}

}  // namespace zaya
