// A corpus file as zaya prepare reads it: the first byte picks the layout (text or JSON lines, plain, gzip
// or zstd), the rest is the file. Files that inflate past 256 KiB are skipped: a few hundred bytes of zstd
// can hold hundreds of MB of blank lines, which the reader goes through in linear time, legitimately, but
// under coverage instrumentation slower than the fuzzer's timeout (1.9 MB in 1.4 s). Corrupt compressed
// data still goes to the reader, which must reject it.
#include <vector>

#include "core/error.h"
#include "data/document_reader.h"
#include "fuzz_input.h"

constexpr uint64_t kMaxInflated = uint64_t(1) << 18;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const kNames[] = {"doc.txt",      "doc.jsonl",   "doc.txt.gz",
                                       "doc.jsonl.gz", "doc.txt.zst", "doc.jsonl.zst"};
  const std::string path =
      zaya::fuzz::write_scratch(kNames[data[0] % 6], {reinterpret_cast<const char*>(data) + 1, size - 1});
  try {
    if (zaya::decompressed_bytes(path, kMaxInflated + 1) > kMaxInflated) return 0;
  } catch (const zaya::Error&) {
  }
  try {
    zaya::DocumentReaderOptions options;
    options.piece_bytes = 64;  // small pieces: the cutting logic runs on short inputs too
    zaya::DocumentReader reader({path}, options);
    std::vector<zaya::DocumentPiece> pieces;
    while (reader.next(pieces, 256)) {
    }
  } catch (const zaya::Error&) {
  }
  return 0;
}
