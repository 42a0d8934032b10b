#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/safetensors_index.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

using nlohmann::json;
using test::fixture;
using test::TempDir;

std::vector<double> values_as_double(const SafetensorsFile& file, const SafetensorsEntry& entry) {
  const TensorView view = file.view(entry);
  const auto* bytes = static_cast<const unsigned char*>(view.data);
  std::vector<double> out;
  for (int64_t i = 0; i < view.numel(); ++i) {
    auto load = [&](auto sample) {
      std::memcpy(&sample, bytes + i * sizeof(sample), sizeof(sample));
      return sample;
    };
    switch (view.dtype) {
      case DType::F32:
        out.push_back(load(float{}));
        break;
      case DType::F64:
        out.push_back(load(double{}));
        break;
      case DType::BF16:
        out.push_back(bf16_to_f32(load(uint16_t{})));
        break;
      case DType::F16:
        out.push_back(f16_to_f32(load(uint16_t{})));
        break;
      case DType::I32:
        out.push_back(load(int32_t{}));
        break;
      case DType::I64:
        out.push_back(double(load(int64_t{})));
        break;
      case DType::U8:
        out.push_back(load(uint8_t{}));
        break;
      case DType::Bool:
        out.push_back(load(uint8_t{}));
        break;
      default:
        ADD_FAILURE() << "unexpected dtype";
    }
  }
  return out;
}

// Every tensor the Python `safetensors` package wrote reads back with its dtype, shape and values.
TEST(Safetensors, ReadsWhatThePythonPackageWrote) {
  const SafetensorsFile file(fixture("io/python_written.safetensors"));
  const json expected = json::parse(read_text_file(fixture("io/python_written.json")));
  ASSERT_EQ(file.entries().size(), expected.size());
  EXPECT_EQ(file.metadata().at("origin"), "zaya fixture");
  for (const auto& [name, want] : expected.items()) {
    const SafetensorsEntry* entry = file.find(name);
    ASSERT_NE(entry, nullptr) << name;
    Shape shape;
    for (int64_t dim : want["shape"]) shape.push_back(dim);
    EXPECT_EQ(entry->shape, shape) << name;
    const std::vector<double> values = values_as_double(file, *entry);
    ASSERT_EQ(values.size(), want["values"].size()) << name;
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_EQ(values[i], want["values"][i].get<double>()) << name << i;
  }
  EXPECT_EQ(file.find("bf16")->dtype, DType::BF16);
  EXPECT_EQ(file.find("bool")->dtype, DType::Bool);
  EXPECT_EQ(file.find("missing"), nullptr);
}

TEST(Safetensors, RoundTripsEveryComputeDtype) {
  TempDir dir;
  Tensor f32(DType::F32, {2, 3}), bf16(DType::BF16, {4}), i32(DType::I32, {1, 1, 5}), i64(DType::I64, {2});
  for (int i = 0; i < 6; ++i) f32.as<float>()[i] = float(i) * 0.25f - 1.0f;
  for (int i = 0; i < 4; ++i) bf16.as<uint16_t>()[i] = f32_to_bf16(float(i) + 0.5f);
  for (int i = 0; i < 5; ++i) i32.as<int32_t>()[i] = -i * 1000;
  i64.as<int64_t>()[0] = int64_t(1) << 45;
  i64.as<int64_t>()[1] = -7;

  SafetensorsWriter writer;
  writer.add("a.f32", f32.view());
  writer.add("b.bf16", bf16.view());
  writer.add("c.i32", i32.view());
  writer.add("d.i64", i64.view());
  writer.set_metadata("format", "pt");
  writer.write(dir.file("x.safetensors"));

  const SafetensorsFile file(dir.file("x.safetensors"));
  ASSERT_EQ(file.entries().size(), 4u);
  for (const auto& [name, tensor] : {std::pair<const char*, const Tensor*>{"a.f32", &f32},
                                     {"b.bf16", &bf16},
                                     {"c.i32", &i32},
                                     {"d.i64", &i64}}) {
    const SafetensorsEntry* entry = file.find(name);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->dtype, tensor->dtype());
    EXPECT_EQ(entry->shape, tensor->shape());
    EXPECT_EQ(std::memcmp(file.view(*entry).data, tensor->view().data, tensor->view().nbytes()), 0) << name;
  }
  EXPECT_EQ(file.metadata().at("format"), "pt");
  // The data section starts 8-byte aligned, as the reference writer leaves it.
  const std::string bytes = test::read_bytes(dir.file("x.safetensors"));
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ(header % 8, 0u);
}

// This process's resident pages (/proc/self/statm's second field).
int64_t resident_pages() {
  std::istringstream statm(test::read_bytes("/proc/self/statm"));
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident;
}

// Loading a model reads each tensor once and drops its pages: the load's peak is then the store, not the
// store and the files. A dropped tensor still reads the same (its pages map again from the page cache).
TEST(Safetensors, DroppedPagesLeaveTheProcessAndReadBackTheSame) {
  TempDir dir;
  Tensor big(DType::F32, {8, 1 << 18});  // 8 MiB
  for (int64_t i = 0; i < big.numel(); ++i) big.as<float>()[i] = float(i % 1000) * 0.5f;
  SafetensorsWriter writer;
  writer.add("big", big.view());
  writer.write(dir.file("x.safetensors"));
  const SafetensorsFile file(dir.file("x.safetensors"));
  const SafetensorsEntry& entry = *file.find("big");
  const int64_t page = ::sysconf(_SC_PAGESIZE), pages = int64_t(big.view().nbytes()) / page;

  const int64_t before = resident_pages();
  ASSERT_EQ(std::memcmp(file.view(entry).data, big.view().data, big.view().nbytes()), 0);
  const int64_t read = resident_pages();
  file.drop_pages(entry);
  const int64_t dropped = resident_pages();
  EXPECT_GE(read - before, pages * 9 / 10) << "reading maps the tensor's pages";
  EXPECT_GE(read - dropped, pages * 9 / 10) << "dropping unmaps them";
  EXPECT_EQ(std::memcmp(file.view(entry).data, big.view().data, big.view().nbytes()), 0);
}

TEST(Safetensors, WriterRejectsDuplicateNames) {
  Tensor t(DType::F32, {1});
  SafetensorsWriter writer;
  writer.add("w", t.view());
  EXPECT_THROW(writer.add("w", t.view()), Error);
  EXPECT_THROW(writer.add("__metadata__", t.view()), Error);
}

// Builds a file from a header text and a data section; the length field can be made to lie.
std::string make_file(const std::string& header, size_t data_bytes, std::optional<uint64_t> claimed = {}) {
  const uint64_t length = claimed.value_or(header.size());
  std::string out(8, '\0');
  std::memcpy(out.data(), &length, 8);
  return out + header + std::string(data_bytes, '\x01');
}

struct MalformedCase {
  const char* label;
  std::string bytes;
  const char* expected_fragment;  // the message must say what is wrong
};

class MalformedSafetensors : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedSafetensors, IsAClearErrorNamingTheFile) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  test::write_bytes(path, GetParam().bytes);
  try {
    SafetensorsFile file(path);
    FAIL() << "no error for " << GetParam().label;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(GetParam().expected_fragment), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

const std::string kGood = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";

INSTANTIATE_TEST_SUITE_P(
    Cases, MalformedSafetensors,
    ::testing::Values(
        MalformedCase{"empty file", "", "too short"},
        MalformedCase{"truncated length", std::string("\x10\x00\x00", 3), "too short"},
        MalformedCase{"length past the end", make_file(kGood, 16, 4096), "exceeds"},
        MalformedCase{"huge length", make_file(kGood, 16, ~uint64_t(0)), "exceeds"},
        MalformedCase{"truncated data", make_file(kGood, 15), "past the"},
        MalformedCase{"trailing data", make_file(kGood, 20), "cover"},
        MalformedCase{"not json", make_file("{not json", 0), "not valid JSON"},
        MalformedCase{"not an object", make_file("[1,2]", 0), "not a JSON object"},
        MalformedCase{"unknown dtype",
                      make_file(R"({"w":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})", 4),
                      "unknown dtype"},
        MalformedCase{"negative dim",
                      make_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                      "non-negative"},
        MalformedCase{
            "overflowing shape",
            make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4),
            "overflows"},
        MalformedCase{"size mismatch",
                      make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
                      "needs 12 bytes"},
        MalformedCase{"reversed offsets",
                      make_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4), "reversed"},
        MalformedCase{"offset past end",
                      make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[1000,1004]}})", 4),
                      "past the"},
        MalformedCase{"overlap",
                      make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                12),
                      "overlaps"},
        MalformedCase{"hole", make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
                      "hole"},
        MalformedCase{"duplicate name",
                      make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                8),
                      "twice"},
        MalformedCase{"missing offsets", make_file(R"({"w":{"dtype":"F32","shape":[1]}})", 4),
                      "data_offsets"},
        MalformedCase{"extra key",
                      make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4),
                      "unknown key"},
        MalformedCase{"bad metadata", make_file(R"({"__metadata__":{"a":1}})", 0), "strings"}),
    [](const auto& info) {
      std::string name = info.param.label;
      for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

TEST(WeightSet, ReadsTheShardsTransformersWrote) {
  const WeightSet weights(fixture("io/sharded_model"));
  const json expected = json::parse(read_text_file(fixture("io/sharded_model_tensors.json")));
  std::vector<std::string> want;
  for (const json& name : expected["names"]) want.push_back(name.get<std::string>());
  EXPECT_EQ(weights.names(), want);
  for (const std::string& name : want) {
    const auto found = weights.find(name);
    ASSERT_NE(found.file, nullptr) << name;
    const TensorView view = found.file->view(*found.entry);
    std::vector<float> values(size_t(view.numel()));
    convert_to_f32(view, values.data());
    double sum = 0;
    for (float v : values) sum += v;
    EXPECT_NEAR(sum, expected["checksums"][name].get<double>(), 1e-4 * (1 + std::abs(sum))) << name;
  }
}

TEST(WeightSet, WritesOneFileOrShardsAndReadsThemBack) {
  TempDir dir;
  std::vector<Tensor> storage;
  std::vector<std::pair<std::string, TensorView>> tensors;
  for (int i = 0; i < 5; ++i) {
    storage.emplace_back(DType::F32, Shape{100});
    for (int j = 0; j < 100; ++j) storage.back().as<float>()[j] = float(i * 100 + j);
  }
  for (int i = 0; i < 5; ++i) tensors.emplace_back("t" + std::to_string(i), storage[size_t(i)].view());

  write_weight_set(dir.path(), tensors, 1 << 20, {{"format", "pt"}});
  EXPECT_TRUE(std::filesystem::exists(dir.file("model.safetensors")));
  EXPECT_EQ(WeightSet(dir.path()).names().size(), 5u);

  // 400-byte tensors, 900-byte shards: two tensors per shard, three shards, and the index; the names are
  // the ones weight_file_names gives. Nothing else is touched (what to remove is OutputDirectory's call).
  TempDir shards;
  const std::vector<std::string> written = write_weight_set(shards.path(), tensors, 900, {{"format", "pt"}});
  EXPECT_EQ(written, weight_file_names({400, 400, 400, 400, 400}, 900));
  EXPECT_EQ(written.size(), 4u);
  write_weight_set(dir.path(), tensors, 900, {{"format", "pt"}});
  EXPECT_TRUE(std::filesystem::exists(dir.file("model.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(shards.file("model-00003-of-00003.safetensors")));
  const WeightSet sharded(shards.path());
  ASSERT_EQ(sharded.names().size(), 5u);
  const auto found = sharded.find("t4");
  float value;
  std::memcpy(&value, static_cast<const char*>(found.file->view(*found.entry).data) + 4 * 7, 4);
  EXPECT_EQ(value, 407.0f);
}

TEST(WeightSet, ReportsMissingAndInconsistentIndexes) {
  TempDir dir;
  EXPECT_THROW(WeightSet{dir.path()}, Error);
  test::write_bytes(dir.file("model.safetensors.index.json"),
                    R"({"weight_map": {"v": "model-1.safetensors"}})");
  test::write_bytes(dir.file("model-1.safetensors"), make_file(kGood, 16));
  try {
    WeightSet weights(dir.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lacks"), std::string::npos) << e.what();
  }
  test::write_bytes(dir.file("model.safetensors.index.json"),
                    R"({"weight_map": {"w": "../escape.safetensors"}})");
  EXPECT_THROW(WeightSet{dir.path()}, Error);
}

}  // namespace
}  // namespace zaya
