#pragma once
// Documents out of the files a user has: plain text (a file is one document), JSON lines (a line is one
// document, its text in a configurable field), either of them gzip- or zstd-compressed (.gz, .zst), and
// directories of such files, read recursively in sorted order. Streaming: a large text file comes out in
// pieces cut at line ends, so memory stays bounded whatever the corpus size.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zaya {

struct DocumentPiece {
  std::string text;
  bool first = true;  // the start of a document
  bool last = true;   // the end of a document: an end-of-document token follows it
  std::string where;  // "file:line" of the piece's first line, for errors
};

struct DocumentReaderOptions {
  std::string text_field = "text";       // the JSON lines field that holds the text
  size_t piece_bytes = size_t(1) << 20;  // plain text is cut into pieces of about this size
};

class DocumentReader {
 public:
  // Expands directories; throws Error for a path that does not exist or a directory with no usable file.
  DocumentReader(const std::vector<std::string>& inputs, const DocumentReaderOptions& options);
  ~DocumentReader();

  // Appends pieces until about max_bytes of text were added or the input ends; false once nothing is left.
  // Throws Error naming the file (and line) for invalid UTF-8, an empty file, malformed JSON, a missing or
  // non-string text field.
  bool next(std::vector<DocumentPiece>& out, size_t max_bytes);

  const std::vector<std::string>& files() const { return files_; }
  uint64_t total_bytes() const { return total_bytes_; }  // on disk, compressed where compressed
  uint64_t bytes_read() const;                           // on disk so far

 private:
  class FileReader;
  bool open_next_file();

  std::vector<std::string> files_;
  DocumentReaderOptions options_;
  uint64_t total_bytes_ = 0, finished_bytes_ = 0;
  size_t next_file_ = 0;
  std::unique_ptr<FileReader> current_;
};

// The bytes the file holds once decompressed as its name says (.gz, .zst; others as they are), counted up
// to `limit` (a larger file gives limit): what reading it will cost, before reading it. A few bytes of gzip
// or zstd can inflate to hundreds of MB. Throws Error for a file that cannot be read or is corrupt.
uint64_t decompressed_bytes(const std::string& path, uint64_t limit);

// The byte offset of the first invalid UTF-8 sequence (overlong forms, surrogates and code points past
// U+10FFFF count as invalid), or std::string::npos.
size_t find_invalid_utf8(std::string_view text);

}  // namespace zaya
