#pragma once
// `zaya prepare`: documents from text files to token datasets in Megatron's format, one for training and,
// optionally, one held out for validation. Streaming (memory bounded by the batch of documents in flight,
// not by the corpus), tokenised in parallel, written in input order, each document ended by the
// tokenizer's end-of-document token.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zaya {

struct PrepareOptions {
  std::string tokenizer;            // tokenizer.json
  std::vector<std::string> inputs;  // files and directories
  std::string output;               // writes OUTPUT_train.{bin,idx} and, with a validation share, OUTPUT_val
  double val_fraction = 0.0;        // share of documents held out, decided per document from the seed
  std::string text_field = "text";  // JSON lines field
  std::string eos_token;            // empty: the tokenizer's own end-of-document token
  uint64_t seed = 0;
};

struct PrepareProgress {
  uint64_t bytes_read = 0, total_bytes = 0;
  int64_t documents = 0, tokens = 0;
  double seconds = 0;
};

struct PrepareReport {
  std::string train_prefix, val_prefix;  // val_prefix empty without a validation share
  int64_t train_documents = 0, val_documents = 0, train_tokens = 0, val_tokens = 0;
  uint64_t bytes = 0;  // of text
  int64_t vocab_size = 0;
  double seconds = 0;
};

// Throws Error naming the file (and line) for any bad input; on error nothing is left under the output names.
PrepareReport prepare_dataset(const PrepareOptions& options,
                              const std::function<void(const PrepareProgress&)>& progress);

}  // namespace zaya
