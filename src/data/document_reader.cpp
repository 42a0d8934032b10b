#include "data/document_reader.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_input.h"

namespace zaya {
namespace fs = std::filesystem;

size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int extra;
    uint32_t code;
    if ((c & 0xe0) == 0xc0) {
      extra = 1, code = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2, code = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3, code = c & 0x07;
    } else {
      return i;
    }
    for (int k = 1; k <= extra; ++k) {
      if (i + size_t(k) >= n || (s[i + size_t(k)] & 0xc0) != 0x80) return i;
      code = (code << 6) | (s[i + size_t(k)] & 0x3f);
    }
    const uint32_t minimum = extra == 1 ? 0x80 : extra == 2 ? 0x800 : 0x10000;
    if (code < minimum || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return i;
    i += size_t(extra) + 1;
  }
  return std::string::npos;
}

namespace {

enum class Compression { None, Gzip, Zstd };
enum class Layout { Text, JsonLines };

// Raw bytes of a file, decompressed as its name says.
class ByteSource {
 public:
  ByteSource(const std::string& path, Compression compression) : path_(path), compression_(compression) {
    if (compression_ == Compression::Gzip) {
      gz_ = gzopen(path.c_str(), "rb");
      if (!gz_) throw Error(cat("cannot open: ", std::strerror(errno))).file(path);
      gzbuffer(gz_, 1 << 17);
      return;
    }
    file_ = std::fopen(path.c_str(), "rb");
    if (!file_) throw Error(cat("cannot open: ", std::strerror(errno))).file(path);
    if (compression_ == Compression::Zstd) {
      zstd_ = ZSTD_createDStream();
      ZSTD_initDStream(zstd_);
      compressed_.resize(ZSTD_DStreamInSize());
    }
  }
  ~ByteSource() {
    if (gz_) gzclose(gz_);
    if (file_) std::fclose(file_);
    if (zstd_) ZSTD_freeDStream(zstd_);
  }

  // Up to n bytes; 0 at the end.
  size_t read(char* out, size_t n) {
    if (compression_ == Compression::Gzip) {
      const int got = gzread(gz_, out, unsigned(std::min<size_t>(n, 1 << 30)));
      if (got < 0) throw Error("corrupt gzip data").file(path_);
      // zlib passes non-gzip bytes through unchanged; a .gz name promises gzip.
      if (got > 0 && gzdirect(gz_)) throw Error("not gzip data").file(path_);
      if (got == 0) {
        // zlib ends a stream cut short as if it were complete, leaving Z_BUF_ERROR to say so.
        int status = Z_OK;
        gzerror(gz_, &status);
        if (status == Z_BUF_ERROR) throw Error("truncated gzip data").file(path_);
      }
      return size_t(got);
    }
    if (compression_ == Compression::None) {
      const size_t got = std::fread(out, 1, n, file_);
      if (got == 0 && std::ferror(file_)) throw Error(cat("read failed: ", std::strerror(errno))).file(path_);
      return got;
    }
    ZSTD_outBuffer output{out, n, 0};
    while (output.pos == 0) {
      if (input_.pos == input_.size) {
        const size_t got = std::fread(compressed_.data(), 1, compressed_.size(), file_);
        if (got == 0) {
          if (frame_open_) throw Error("truncated zstd data").file(path_);
          return 0;
        }
        input_ = {compressed_.data(), got, 0};
      }
      const size_t status = ZSTD_decompressStream(zstd_, &output, &input_);
      if (ZSTD_isError(status))
        throw Error(cat("corrupt zstd data: ", ZSTD_getErrorName(status))).file(path_);
      frame_open_ = status != 0;
    }
    return output.pos;
  }

  // Bytes consumed from the file on disk.
  uint64_t position() const {
    if (gz_) return uint64_t(gzoffset(gz_));
    return file_ ? uint64_t(std::ftell(file_)) : 0;
  }

 private:
  std::string path_;
  Compression compression_;
  gzFile gz_ = nullptr;
  std::FILE* file_ = nullptr;
  ZSTD_DStream* zstd_ = nullptr;
  std::vector<char> compressed_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  bool frame_open_ = false;
};

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The layout and compression a file name implies; nullopt for names a directory scan skips.
std::optional<std::pair<Layout, Compression>> classify(const std::string& name, bool named_explicitly) {
  Compression compression = Compression::None;
  std::string inner = name;
  if (ends_with(name, ".gz")) {
    compression = Compression::Gzip, inner = name.substr(0, name.size() - 3);
  } else if (ends_with(name, ".zst")) {
    compression = Compression::Zstd, inner = name.substr(0, name.size() - 4);
  }
  if (ends_with(inner, ".jsonl") || ends_with(inner, ".ndjson"))
    return std::pair{Layout::JsonLines, compression};
  for (const char* text : {".txt", ".text", ".rst", ".md", ".py"}) {
    if (ends_with(inner, text)) return std::pair{Layout::Text, compression};
  }
  if (named_explicitly) return std::pair{Layout::Text, compression};
  return std::nullopt;
}

}  // namespace

uint64_t decompressed_bytes(const std::string& path, uint64_t limit) {
  ByteSource source(path, classify(fs::path(path).filename().string(), true)->second);
  std::vector<char> buffer(1 << 16);
  uint64_t total = 0;
  while (total < limit) {
    const size_t got = source.read(buffer.data(), buffer.size());
    if (got == 0) break;
    total += got;
  }
  return std::min(total, limit);
}

class DocumentReader::FileReader {
 public:
  FileReader(const std::string& path, Layout layout, Compression compression,
             const DocumentReaderOptions& options)
      : path_(path), layout_(layout), source_(path, compression), options_(options) {}

  bool next(std::vector<DocumentPiece>& out, size_t max_bytes) {
    size_t added = 0;
    std::string line;
    while (added < max_bytes) {
      if (!read_line(line)) {
        if (layout_ == Layout::Text) {
          if (line_number_ == 0 && !document_started_) throw Error("empty file").file(path_);
          if (!pending_.empty() || document_started_) emit_text(out, true);
        } else if (documents_ == 0) {
          throw Error(line_number_ == 0 ? "empty file" : "no documents (only blank lines)").file(path_);
        }
        return false;
      }
      if (const size_t bad = find_invalid_utf8(line); bad != std::string::npos) {
        throw Error(cat("invalid UTF-8 at byte ", bad + 1, " of line ", line_number_)).file(path_);
      }
      if (layout_ == Layout::JsonLines) {
        added += parse_json_line(line, out);
        continue;
      }
      // A piece's place is formatted once per piece, not per line: 390k blank lines (a 47-byte zstd frame)
      // took 1.3 s under the fuzzer's sanitizers, most of it making strings nobody read.
      if (pending_.empty()) pending_where_ = place();
      pending_ += line;
      added += line.size();
      if (pending_.size() >= options_.piece_bytes) emit_text(out, false);
    }
    return true;
  }

  uint64_t position() const { return source_.position(); }

 private:
  // The next line with its newline kept (text files keep their exact bytes); false at the end of the file.
  bool read_line(std::string& line) {
    line.clear();
    for (;;) {
      if (cursor_ == buffered_) {
        buffer_.resize(1 << 16);
        buffered_ = source_.read(buffer_.data(), buffer_.size());
        cursor_ = 0;
        if (buffered_ == 0) {
          if (line.empty()) return false;
          ++line_number_;
          return true;
        }
      }
      const char* start = buffer_.data() + cursor_;
      const char* newline = static_cast<const char*>(std::memchr(start, '\n', buffered_ - cursor_));
      const size_t take = newline ? size_t(newline - start) + 1 : buffered_ - cursor_;
      line.append(start, take);
      cursor_ += take;
      if (newline) {
        ++line_number_;
        return true;
      }
    }
  }

  void emit_text(std::vector<DocumentPiece>& out, bool last) {
    out.push_back({std::move(pending_), !document_started_, last, pending_where_});
    pending_.clear();
    document_started_ = !last;
  }

  // "file:line" of the line just read.
  std::string place() const { return cat(path_, ":", line_number_); }

  size_t parse_json_line(const std::string& line, std::vector<DocumentPiece>& out) {
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) return 0;  // blank lines separate nothing
    const nlohmann::json record = parse_json(line, path_, cat("line ", line_number_, ": "));
    if (!record.is_object()) throw Error(cat("line ", line_number_, " is not a JSON object")).file(path_);
    const auto field = record.find(options_.text_field);
    if (field == record.end()) {
      throw Error(cat("line ", line_number_, " has no \"", options_.text_field, "\" field"))
          .file(path_)
          .field(options_.text_field);
    }
    if (!field->is_string()) {
      throw Error(cat("line ", line_number_, ": the \"", options_.text_field, "\" field is not a string"))
          .file(path_)
          .field(options_.text_field);
    }
    out.push_back({field->get<std::string>(), true, true, place()});
    ++documents_;
    return out.back().text.size();
  }

  std::string path_;
  Layout layout_;
  ByteSource source_;
  DocumentReaderOptions options_;
  std::vector<char> buffer_;
  size_t cursor_ = 0, buffered_ = 0;
  int64_t line_number_ = 0, documents_ = 0;
  std::string pending_, pending_where_;
  bool document_started_ = false;
};

DocumentReader::DocumentReader(const std::vector<std::string>& inputs, const DocumentReaderOptions& options)
    : options_(options) {
  for (const std::string& input : inputs) {
    std::error_code error;
    if (fs::is_directory(input, error)) {
      std::vector<std::string> found;
      // Unreadable subdirectories are errors naming them, not "cannot increment" naming nothing.
      // A failed step names the entry it failed past (the subdirectory it could not enter).
      std::string last = input;
      for (fs::recursive_directory_iterator it(input, error), end; !error && it != end; it.increment(error)) {
        last = it->path().string();
        if (it->is_regular_file(error) && classify(it->path().filename().string(), false))
          found.push_back(last);
      }
      if (error) throw Error(cat("cannot list: ", error.message())).file(last);
      if (found.empty())
        throw Error("no .txt, .rst, .md, .py or .jsonl files (optionally .gz or .zst) in the directory")
            .file(input);
      std::sort(found.begin(), found.end());
      files_.insert(files_.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(input, error)) {
      files_.push_back(input);
    } else {
      throw Error("no such file or directory").file(input);
    }
  }
  if (files_.empty()) throw Error("no input files").field("--input");
  for (const std::string& file : files_) total_bytes_ += fs::file_size(file);
}

DocumentReader::~DocumentReader() = default;

bool DocumentReader::open_next_file() {
  if (current_) {
    finished_bytes_ += fs::file_size(files_[next_file_ - 1]);
    current_.reset();
  }
  if (next_file_ == files_.size()) return false;
  const std::string& path = files_[next_file_++];
  const auto kind = classify(fs::path(path).filename().string(), true);
  current_ = std::make_unique<FileReader>(path, kind->first, kind->second, options_);
  return true;
}

bool DocumentReader::next(std::vector<DocumentPiece>& out, size_t max_bytes) {
  const size_t start = out.size();
  size_t added = 0;
  while (added < max_bytes) {
    if (!current_ && !open_next_file()) return out.size() > start;
    const size_t before = out.size();
    const bool more = current_->next(out, max_bytes - added);
    for (size_t i = before; i < out.size(); ++i) added += out[i].text.size();
    if (!more && !open_next_file()) return out.size() > start;
  }
  return true;
}

uint64_t DocumentReader::bytes_read() const {
  return finished_bytes_ + (current_ ? current_->position() : 0);
}

}  // namespace zaya
