// Input past zaya's limits is an Error naming the file, not a crash: JSON nested deep enough to overflow
// the stack of recursive JSON code, and files too large (or not regular) to read whole.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "data/document_reader.h"
#include "io/atomic_file.h"
#include "io/hf_config.h"
#include "io/json_input.h"
#include "io/safetensors.h"
#include "tokenizer/document.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

std::string nested(int depth) {
  return std::string(size_t(depth), '[') + std::string(size_t(depth), ']');
}

// The Error's message, or "" when none was thrown.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

constexpr int kDeep = 100000;  // segfaulted `zaya info` before the limit

TEST(InputLimits, JsonNestingIsBounded) {
  EXPECT_NO_THROW(parse_json("{\"a\":" + nested(kMaxJsonDepth - 2) + "}", "x.json"));
  for (int depth : {kMaxJsonDepth + 1, kDeep}) {
    const std::string message = error_of([&] { parse_json(nested(depth), "x.json", "line 3: "); });
    EXPECT_NE(message.find("x.json"), std::string::npos) << message;
    EXPECT_NE(message.find("line 3: JSON nested deeper than 64 levels"), std::string::npos) << message;
  }
}

// A checkpoint's integers (its step, the data position) read only as integers int64 holds: a fuzzed
// trainer_state.json with "samples": -333...339 (parsed as a float) was cast to int64, undefined behaviour.
TEST(InputLimits, JsonIntegersOutsideInt64AreErrorsNamingTheField) {
  EXPECT_EQ(json_int64(parse_json("-9223372036854775808", "s.json"), "s.json", "step"), INT64_MIN);
  EXPECT_EQ(json_int64(parse_json("9223372036854775807", "s.json"), "s.json", "step"), INT64_MAX);
  for (const char* bad :
       {"-3333333333333333333333333339", "9223372036854775808", "1.5", "1e3", "\"7\"", "[]"}) {
    const std::string message =
        error_of([&] { json_int64(parse_json(bad, "s.json"), "s.json", "loader.samples"); });
    EXPECT_NE(message.find("s.json"), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find("loader.samples"), std::string::npos) << bad << ": " << message;
  }
  EXPECT_EQ(json_int64_array(parse_json("[0, -2, 7]", "s.json"), "s.json", "drawn"),
            (std::vector<int64_t>{0, -2, 7}));
  for (const char* bad : {"[0, 1.5]", "[1e30]", "{}", "3"}) {
    const std::string message =
        error_of([&] { json_int64_array(parse_json(bad, "s.json"), "s.json", "drawn"); });
    EXPECT_NE(message.find("drawn"), std::string::npos) << bad << ": " << message;
  }
}

TEST(InputLimits, EveryJsonReaderBoundsNesting) {
  const std::string deep = "{\"a\":" + nested(kDeep) + "}";
  auto expect_named = [](const std::string& message, const std::string& file) {
    EXPECT_NE(message.find(file), std::string::npos) << message;
    EXPECT_NE(message.find("nest"), std::string::npos) << message;
  };
  expect_named(error_of([&] { parse_config(deep, "config.json"); }), "config.json");
  expect_named(error_of([&] { tok::read_tokenizer_document(deep, "tokenizer.json"); }), "tokenizer.json");

  test::TempDir dir;
  const std::string header =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":" + nested(kDeep) + "}}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  test::write_bytes(dir.file("deep.safetensors"), file + header + std::string(4, '\0'));
  expect_named(error_of([&] { SafetensorsFile f(dir.file("deep.safetensors")); }), "deep.safetensors");

  test::write_bytes(dir.file("deep.jsonl"), "{\"text\":\"fine\"}\n{\"text\":" + nested(kDeep) + "}\n");
  expect_named(error_of([&] {
                 DocumentReader reader({dir.file("deep.jsonl")}, {});
                 std::vector<DocumentPiece> pieces;
                 while (reader.next(pieces, 1 << 20)) {
                 }
               }),
               "deep.jsonl");
}

TEST(InputLimits, TextFilesAreRegularAndBounded) {
  test::TempDir dir;
  const std::string huge = dir.file("huge.json");
  test::write_bytes(huge, "{}");
  std::filesystem::resize_file(huge, kMaxTextFileBytes + 1);  // sparse: no disk used
  const std::string message = error_of([&] { read_text_file(huge); });
  EXPECT_NE(message.find("huge.json"), std::string::npos) << message;
  EXPECT_NE(message.find("1024 MiB"), std::string::npos) << message;

  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { read_text_file(fifo); }).find("not a regular file"), std::string::npos)
      << "reading a FIFO would wait for a writer forever";
}

}  // namespace
}  // namespace zaya
