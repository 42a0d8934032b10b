#include "data/indexed_dataset.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/atomic_file.h"

namespace zaya {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

template <class T>
T load(const unsigned char* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

bool valid_code(uint8_t code) {
  return code == 1 || code == 2 || code == 3 || code == 4 || code == 5 || code == 8;
}

}  // namespace

size_t token_dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::UInt8:
    case TokenDType::Int8:
      return 1;
    case TokenDType::Int16:
    case TokenDType::UInt16:
      return 2;
    case TokenDType::Int32:
      return 4;
    case TokenDType::Int64:
      return 8;
  }
  return 0;
}

TokenDType token_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::UInt16 : TokenDType::Int32;
}

IndexedDataset::IndexedDataset(const std::string& prefix)
    : prefix_(prefix), index_(prefix + ".idx"), data_(prefix + ".bin") {
  const std::string idx = index_.path(), bin = data_.path();
  const unsigned char* p = index_.data();
  if (index_.size() < kHeaderBytes)
    throw Error(cat("index is ", index_.size(), " bytes, shorter than its header")).file(idx);
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0)
    throw Error("not a Megatron indexed dataset (no MMIDIDX header)").file(idx);
  if (load<uint64_t>(p + 9) != 1)
    throw Error(cat("index version ", load<uint64_t>(p + 9), ", expected 1")).file(idx);
  const uint8_t code = p[17];
  if (!valid_code(code))
    throw Error(cat("token dtype code ", int(code), " is not an integer type")).file(idx);
  dtype_ = TokenDType(code);
  const uint64_t sequences = load<uint64_t>(p + 18), documents = load<uint64_t>(p + 26);
  // Each count is bounded by the file size before any multiplication can overflow.
  if (sequences > index_.size() / 12 || documents > index_.size() / 8) {
    throw Error(
        cat("claims ", sequences, " sequences and ", documents, " documents, more than the file holds"))
        .file(idx);
  }
  const uint64_t body = sequences * 12 + documents * 8;
  const uint64_t size = index_.size() - kHeaderBytes;
  if (size != body && size != body + sequences) {  // the second layout carries multimodal sequence modes
    throw Error(cat("index is ", index_.size(), " bytes but ", sequences, " sequences and ", documents,
                    " documents need ", kHeaderBytes + body))
        .file(idx);
  }
  sequence_count_ = int64_t(sequences);
  document_count_ = int64_t(documents);
  lengths_ = p + kHeaderBytes;
  pointers_ = lengths_ + 4 * sequences;
  documents_ = pointers_ + 8 * sequences;
  const unsigned char* document_starts = documents_;

  const uint64_t item = token_dtype_size(dtype_);
  uint64_t expected_pointer = 0;
  for (int64_t s = 0; s < sequence_count_; ++s) {
    const int32_t length = load<int32_t>(lengths_ + 4 * s);
    const int64_t pointer = load<int64_t>(pointers_ + 8 * s);
    if (length < 0) throw Error(cat("sequence ", s, " has negative length ", length)).file(idx);
    if (pointer < 0 || uint64_t(pointer) != expected_pointer) {
      throw Error(cat("sequence ", s, " starts at byte ", pointer, " but the lengths before it end at ",
                      expected_pointer))
          .file(idx);
    }
    expected_pointer += uint64_t(length) * item;
    total_tokens_ += length;
  }
  if (expected_pointer != data_.size()) {
    throw Error(cat("the index describes ", expected_pointer, " bytes of tokens but the data file has ",
                    data_.size()))
        .file(bin);
  }
  if (document_count_ < 1) throw Error("no document indices (expected at least [0])").file(idx);
  int64_t previous = 0;
  for (int64_t d = 0; d < document_count_; ++d) {
    const int64_t start = load<int64_t>(document_starts + 8 * d);
    if ((d == 0 && start != 0) || start < previous || start > sequence_count_) {
      throw Error(cat("document index ", d, " is ", start, ", out of order or past the ", sequence_count_,
                      " sequences"))
          .file(idx);
    }
    previous = start;
  }
  if (previous != sequence_count_) {
    throw Error(
        cat("the last document index is ", previous, ", expected the sequence count ", sequence_count_))
        .file(idx);
  }
}

int64_t IndexedDataset::sequence_length(int64_t sequence) const {
  return load<int32_t>(lengths_ + 4 * sequence);
}

int64_t IndexedDataset::document_start(int64_t document) const {
  return load<int64_t>(documents_ + 8 * document);
}

void IndexedDataset::read(int64_t sequence, int64_t offset, int64_t count, int32_t* out,
                          int64_t vocab_limit) const {
  const size_t item = token_dtype_size(dtype_);
  const unsigned char* at = data_.data() + load<int64_t>(pointers_ + 8 * sequence) + size_t(offset) * item;
  for (int64_t i = 0; i < count; ++i, at += item) {
    int64_t token = 0;
    switch (dtype_) {
      case TokenDType::UInt8:
        token = *at;
        break;
      case TokenDType::Int8:
        token = int8_t(*at);
        break;
      case TokenDType::UInt16:
        token = load<uint16_t>(at);
        break;
      case TokenDType::Int16:
        token = load<int16_t>(at);
        break;
      case TokenDType::Int32:
        token = load<int32_t>(at);
        break;
      case TokenDType::Int64:
        token = load<int64_t>(at);
        break;
    }
    if (token < 0 || token > INT32_MAX || (vocab_limit > 0 && token >= vocab_limit)) {
      throw Error(
          cat("sequence ", sequence, " holds token id ", token, ", outside the vocabulary of ", vocab_limit))
          .file(data_.path());
    }
    out[i] = int32_t(token);
  }
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype), bin_(prefix_ + ".bin") {
  if (dtype_ != TokenDType::UInt16 && dtype_ != TokenDType::Int32)
    throw Error("zaya writes uint16 or int32 tokens").file(prefix_ + ".bin");
}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

void IndexedDatasetWriter::add_document(const int32_t* tokens, int64_t count) {
  const size_t item = token_dtype_size(dtype_);
  const int64_t limit = dtype_ == TokenDType::UInt16 ? 65535 : INT32_MAX;
  staging_.resize(size_t(count) * item);
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] > limit) {
      throw Error(cat("token id ", tokens[i], " does not fit the dataset's token type"))
          .file(prefix_ + ".bin");
    }
    max_token_id_ = std::max<int64_t>(max_token_id_, tokens[i]);
    if (item == 2) {
      const uint16_t narrow = uint16_t(tokens[i]);
      std::memcpy(staging_.data() + 2 * size_t(i), &narrow, 2);
    } else {
      std::memcpy(staging_.data() + 4 * size_t(i), &tokens[i], 4);
    }
  }
  bin_.write(staging_.data(), staging_.size());
  lengths_.push_back(int32_t(count));
  tokens_ += count;
}

void IndexedDatasetWriter::finish(
    const std::function<void(const FileStamp& bin, const FileStamp& idx)>& before_commit) {
  const uint64_t sequences = lengths_.size(), documents = sequences + 1, version = 1;
  std::vector<unsigned char> index(kHeaderBytes + sequences * 12 + documents * 8);
  unsigned char* p = index.data();
  std::memcpy(p, kMagic, sizeof kMagic);
  std::memcpy(p + 9, &version, 8);
  p[17] = uint8_t(dtype_);
  std::memcpy(p + 18, &sequences, 8);
  std::memcpy(p + 26, &documents, 8);
  std::memcpy(p + kHeaderBytes, lengths_.data(), sequences * 4);
  int64_t pointer = 0;
  for (uint64_t s = 0; s < sequences; ++s) {
    std::memcpy(p + kHeaderBytes + sequences * 4 + s * 8, &pointer, 8);
    pointer += int64_t(lengths_[s]) * int64_t(token_dtype_size(dtype_));
  }
  for (uint64_t d = 0; d < documents; ++d) {
    const int64_t start = int64_t(d);
    std::memcpy(p + kHeaderBytes + sequences * 12 + d * 8, &start, 8);
  }

  // A dataset being replaced loses its index first: a process killed between the two renames leaves a
  // .bin without a .idx (refused on load), never the new tokens under the old index.
  AtomicFileWriter index_file(prefix_ + ".idx");
  index_file.write(index.data(), index.size());
  if (before_commit) {
    const std::optional<FileStamp> bin = file_stamp(bin_.temp_path()),
                                   idx = file_stamp(index_file.temp_path());
    if (!bin || !idx) throw Error("vanished as it was written").file(prefix_ + ".bin");
    before_commit(*bin, *idx);
  }
  std::error_code ignored;
  std::filesystem::remove(prefix_ + ".idx", ignored);
  bin_.commit();
  index_file.commit();
}

}  // namespace zaya
