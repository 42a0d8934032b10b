#pragma once
// Megatron-LM's indexed dataset, the "MMIDIDX" version 1 layout ZAYA1's pipeline used: PREFIX.bin holds
// the tokens of every sequence back to back; PREFIX.idx holds
//   "MMIDIDX\0\0" | u64 version = 1 | u8 dtype code | u64 sequence count S | u64 document count D |
//   i32 lengths[S] | i64 byte pointers[S] | i64 document indices[D] (| i8 modes[S], multimodal only)
// where the document indices are the sequence numbers at which documents start, 0 first and S last. zaya
// writes one sequence per document. Existing Megatron datasets load as they are.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "io/atomic_file.h"
#include "io/file_stamp.h"

namespace zaya {

// Megatron's dtype codes.
enum class TokenDType : uint8_t { UInt8 = 1, Int8 = 2, Int16 = 3, Int32 = 4, Int64 = 5, UInt16 = 8 };

size_t token_dtype_size(TokenDType dtype);
// As Megatron picks it: uint16 below 65500 tokens, int32 above.
TokenDType token_dtype_for_vocab(int64_t vocab_size);

class IndexedDataset {
 public:
  // Maps PREFIX.idx and PREFIX.bin and checks them against each other; throws Error naming the file and
  // the offending entry.
  explicit IndexedDataset(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  int64_t sequence_count() const { return sequence_count_; }
  int64_t document_count() const { return document_count_ - 1; }
  int64_t sequence_length(int64_t sequence) const;
  // The sequences of document d are [document_start(d), document_start(d + 1)).
  int64_t document_start(int64_t document) const;
  int64_t total_tokens() const { return total_tokens_; }
  TokenDType dtype() const { return dtype_; }

  // Tokens [offset, offset + count) of a sequence as int32. A token outside [0, vocab_limit) is an Error
  // naming the file and sequence (vocab_limit <= 0 checks nothing).
  void read(int64_t sequence, int64_t offset, int64_t count, int32_t* out, int64_t vocab_limit = 0) const;

 private:
  std::string prefix_;
  MappedFile index_, data_;
  TokenDType dtype_ = TokenDType::UInt16;
  int64_t sequence_count_ = 0, document_count_ = 0, total_tokens_ = 0;
  const unsigned char* lengths_ = nullptr;    // i32[S], possibly unaligned
  const unsigned char* pointers_ = nullptr;   // i64[S]
  const unsigned char* documents_ = nullptr;  // i64[D]
};

// Streams documents into PREFIX.bin and PREFIX.idx under temporary names; finish() renames them into place
// (data first, index last), so an interrupted write never leaves a dataset under the final name.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(std::string prefix, TokenDType dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  void add_document(const int32_t* tokens, int64_t count);
  // Writes the index, then calls `before_commit` with the stamps PREFIX.bin and PREFIX.idx will have (a
  // rename keeps them), then gives both files their names.
  void finish(const std::function<void(const FileStamp& bin, const FileStamp& idx)>& before_commit = {});
  int64_t documents() const { return int64_t(lengths_.size()); }
  int64_t tokens() const { return tokens_; }
  int64_t max_token_id() const { return max_token_id_; }  // -1 before the first token

 private:
  std::string prefix_;
  TokenDType dtype_;
  AtomicFileWriter bin_;  // PREFIX.bin under a temporary name until finish()
  std::vector<int32_t> lengths_;
  std::vector<unsigned char> staging_;
  int64_t tokens_ = 0, max_token_id_ = -1;
};

}  // namespace zaya
