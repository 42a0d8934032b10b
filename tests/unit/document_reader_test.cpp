#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>

#include "core/error.h"
#include "data/document_reader.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

std::vector<DocumentPiece> read_all(const std::vector<std::string>& inputs,
                                    DocumentReaderOptions options = {}) {
  DocumentReader reader(inputs, options);
  std::vector<DocumentPiece> out;
  while (reader.next(out, 1 << 20)) {
  }
  EXPECT_EQ(reader.bytes_read(), reader.total_bytes());
  return out;
}

void write_gzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, text.data(), unsigned(text.size()));
  gzclose(f);
}

void write_zstd(const std::string& path, const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3));
  test::write_bytes(path, out);
}

TEST(DocumentReader, ReadsTextJsonLinesCompressedAndDirectories) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("corpus/sub"));
  test::write_bytes(dir.file("corpus/b.txt"), "second file\n");
  test::write_bytes(dir.file("corpus/a.rst"), "first file\r\nwith two lines");
  test::write_bytes(dir.file("corpus/sub/c.jsonl"),
                    "{\"text\": \"json one\", \"id\": 1}\n\n{\"text\": \"json \\u00e9\"}\n");
  test::write_bytes(dir.file("corpus/skip.bin"), "\x01\x02");
  write_gzip(dir.file("corpus/sub/d.txt.gz"), "gzip text");
  write_zstd(dir.file("corpus/sub/e.jsonl.zst"), "{\"body\": \"zstd json\", \"text\": \"zstd text\"}\n");
  const auto pieces = read_all({dir.file("corpus")});
  std::vector<std::string> texts;
  for (const auto& p : pieces) {
    EXPECT_TRUE(p.first && p.last);
    texts.push_back(p.text);
  }
  EXPECT_EQ(texts, (std::vector<std::string>{"first file\r\nwith two lines", "second file\n", "json one",
                                             "json \xc3\xa9", "gzip text", "zstd text"}));
  EXPECT_NE(pieces[3].where.find("c.jsonl:3"), std::string::npos);
  EXPECT_EQ(read_all({dir.file("corpus/sub/e.jsonl.zst")}, {"body"})[0].text, "zstd json");
}

TEST(DocumentReader, CutsLargeTextIntoPiecesAtLineEnds) {
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "line " + std::to_string(i) + "\n";
  test::write_bytes(dir.file("big.txt"), text);
  DocumentReaderOptions options;
  options.piece_bytes = 1000;
  const auto pieces = read_all({dir.file("big.txt")}, options);
  ASSERT_GT(pieces.size(), 5u);
  std::string joined;
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].first, i == 0);
    EXPECT_EQ(pieces[i].last, i + 1 == pieces.size());
    EXPECT_EQ(pieces[i].text.back(), '\n');
    joined += pieces[i].text;
  }
  EXPECT_EQ(joined, text);
}

// A compressed file cut short is an error, never read as if it were complete (a copy that stopped half way).
TEST(DocumentReader, TruncatedCompressedFilesAreErrors) {
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i * 7919 % 100003) + "\n";
  write_gzip(dir.file("cut.txt.gz"), text);
  write_zstd(dir.file("cut.txt.zst"), text);
  for (const char* name : {"cut.txt.gz", "cut.txt.zst"}) {
    const std::string whole = test::read_bytes(dir.file(name));
    test::write_bytes(dir.file(name), whole.substr(0, whole.size() / 2));
    try {
      read_all({dir.file(name)});
      FAIL() << name << " cut in half was read as complete";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    }
  }
}

// What a file costs to read, known before reading it: its size once decompressed, up to a limit.
TEST(DocumentReader, DecompressedBytesCountsUpToTheLimit) {
  test::TempDir dir;
  const std::string blank_lines(1 << 20, '\n');  // 1 MiB that zstd and gzip hold in a few KB
  test::write_bytes(dir.file("plain.txt"), "twelve bytes");
  write_gzip(dir.file("lines.txt.gz"), blank_lines);
  write_zstd(dir.file("lines.jsonl.zst"), blank_lines);
  EXPECT_EQ(decompressed_bytes(dir.file("plain.txt"), 100), 12u);
  EXPECT_EQ(decompressed_bytes(dir.file("plain.txt"), 5), 5u);
  for (const char* name : {"lines.txt.gz", "lines.jsonl.zst"}) {
    EXPECT_LT(test::read_bytes(dir.file(name)).size(), 10000u) << name;
    EXPECT_EQ(decompressed_bytes(dir.file(name), uint64_t(1) << 30), uint64_t(1) << 20) << name;
    EXPECT_EQ(decompressed_bytes(dir.file(name), 1000), 1000u) << name;
  }
  test::write_bytes(dir.file("fake.txt.zst"), "not zstd");
  EXPECT_THROW(decompressed_bytes(dir.file("fake.txt.zst"), 100), Error);
  EXPECT_THROW(decompressed_bytes(dir.file("none.txt"), 100), Error);
}

struct BadInput {
  const char* name;
  std::string content;
  const char* fragment;
};

class BadDocuments : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadDocuments, AreErrorsNamingTheFileAndLine) {
  test::TempDir dir;
  const std::string path = dir.file(GetParam().name);
  test::write_bytes(path, GetParam().content);
  try {
    read_all({path});
    FAIL() << GetParam().name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(GetParam().fragment), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadDocuments,
    ::testing::Values(BadInput{"empty.txt", "", "empty file"}, BadInput{"empty.jsonl", "", "empty file"},
                      BadInput{"bad.txt", "fine\nbad \xff byte\n", "invalid UTF-8 at byte 5 of line 2"},
                      BadInput{"overlong.txt", "\xc0\xaf", "invalid UTF-8"},
                      BadInput{"surrogate.txt", "\xed\xa0\x80", "invalid UTF-8"},
                      BadInput{"cut.txt", "ok \xe2\x82", "invalid UTF-8"},
                      BadInput{"nofield.jsonl", "{\"text\": \"a\"}\n{\"body\": \"b\"}\n",
                               "line 2 has no \"text\" field"},
                      BadInput{"number.jsonl", "{\"text\": 5}\n", "is not a string"},
                      BadInput{"broken.jsonl", "{\"text\": \"a\"\n", "line 1: not valid JSON"},
                      BadInput{"array.jsonl", "[1]\n", "not a JSON object"},
                      BadInput{"blank.jsonl", "\n\n", "no documents"},
                      BadInput{"fake.txt.gz", "not gzip at all", "gzip"},
                      BadInput{"fake.jsonl.zst", "not zstd", "zstd"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(DocumentReader, MissingPathsAndEmptyDirectoriesAreNamed) {
  test::TempDir dir;
  EXPECT_THROW(DocumentReader({dir.file("nope")}, {}), Error);
  std::filesystem::create_directories(dir.file("empty"));
  EXPECT_THROW(DocumentReader({dir.file("empty")}, {}), Error);
}

TEST(DocumentReader, Utf8Validation) {
  EXPECT_EQ(find_invalid_utf8("plain ascii"), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("\xe4\xb8\xad\xf0\x9f\x98\x80"), std::string::npos);  // CJK and an emoji
  EXPECT_EQ(find_invalid_utf8("ab\x80"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(find_invalid_utf8("\xe0\x80\x80"), 0u);      // overlong
}

}  // namespace
}  // namespace zaya
