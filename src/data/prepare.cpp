#include "data/prepare.h"

#include <chrono>
#include <exception>
#include <memory>
#include <new>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "data/dataset_provenance.h"
#include "data/document_reader.h"
#include "data/indexed_dataset.h"
#include "tokenizer/tokenizer.h"

namespace zaya {
namespace {

// Text handed to the tokenizer threads at a time: large enough to keep both cores busy, small enough
// that memory does not grow with the corpus.
constexpr size_t kBatchBytes = size_t(8) << 20;

// Lines are read whole (a document's pieces end at line ends), so a very long one needs memory many times
// its size.
Error out_of_memory(const std::string& where, size_t bytes) {
  if (bytes == 0) return Error(cat(where, ": out of memory reading the text (a line is read whole)"));
  return Error(cat(where, ": out of memory preparing ", bytes, " bytes of text (a line is read whole)"));
}

// Rethrows a piece's failure, an Error naming where the piece starts (an out-of-memory goes on to the
// batch's handler).
[[noreturn]] void rethrow_naming(const std::exception_ptr& failure, const DocumentPiece& piece) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    throw Error(piece.where + ": " + e.message());
  }
}

}  // namespace

PrepareReport prepare_dataset(const PrepareOptions& options,
                              const std::function<void(const PrepareProgress&)>& progress) {
  if (!(options.val_fraction >= 0 && options.val_fraction < 1)) {
    throw Error(cat("must be in [0, 1), got ", options.val_fraction)).field("--val-fraction");
  }
  const auto start = std::chrono::steady_clock::now();
  const Tokenizer tokenizer = Tokenizer::load(options.tokenizer);
  std::optional<int32_t> eos =
      options.eos_token.empty() ? tokenizer.eos_id() : tokenizer.token_to_id(options.eos_token);
  if (!eos) {
    throw Error(options.eos_token.empty() ? "has no end-of-document token; name one with --eos-token"
                                          : "has no token \"" + options.eos_token + "\"")
        .file(options.tokenizer);
  }
  DocumentReader reader(options.inputs, {options.text_field});

  PrepareReport report;
  report.vocab_size = tokenizer.vocab_size();
  report.train_prefix = options.output + "_train";
  const TokenDType dtype = token_dtype_for_vocab(report.vocab_size);
  IndexedDatasetWriter train(report.train_prefix, dtype);
  std::unique_ptr<IndexedDatasetWriter> val;
  if (options.val_fraction > 0) {
    report.val_prefix = options.output + "_val";
    val = std::make_unique<IndexedDatasetWriter>(report.val_prefix, dtype);
  }

  const RandomStream split(options.seed, RngPurpose::DataOrder, 0x5b1177);
  int64_t document = 0;
  bool document_to_val = false;
  std::vector<int32_t> current;  // the document being assembled from its pieces
  std::vector<DocumentPiece> pieces;
  std::vector<std::vector<int32_t>> encoded;
  PrepareProgress status;
  status.total_bytes = reader.total_bytes();
  size_t batch_bytes = 0;
  try {
    while (true) {
      pieces.clear();
      batch_bytes = 0;
      if (!reader.next(pieces, kBatchBytes)) break;
      for (const DocumentPiece& piece : pieces) batch_bytes += piece.text.size();
      encoded.assign(pieces.size(), {});
      // The first failure in input order is thrown after the loop, naming its piece.
      parallel_for_rethrowing(int64_t(pieces.size()), [&](int64_t i) {
        try {
          encoded[size_t(i)] = tokenizer.encode(pieces[size_t(i)].text);
        } catch (...) {
          rethrow_naming(std::current_exception(), pieces[size_t(i)]);
        }
      });
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (pieces[i].first) {
          current.clear();
          document_to_val = val && split.uniform_double(uint64_t(document)) < options.val_fraction;
          ++document;
        }
        current.insert(current.end(), encoded[i].begin(), encoded[i].end());
        report.bytes += pieces[i].text.size();
        if (!pieces[i].last) continue;
        current.push_back(*eos);
        (document_to_val ? *val : train).add_document(current.data(), int64_t(current.size()));
        (document_to_val ? report.val_tokens : report.train_tokens) += int64_t(current.size());
        ++(document_to_val ? report.val_documents : report.train_documents);
      }
      status.bytes_read = reader.bytes_read();
      status.documents = report.train_documents + report.val_documents;
      status.tokens = report.train_tokens + report.val_tokens;
      status.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (progress) progress(status);
    }
  } catch (const std::bad_alloc&) {
    throw out_of_memory(pieces.empty() ? options.inputs.front() : pieces.front().where, batch_bytes);
  }

  if (report.train_documents == 0)
    throw Error("every document went to validation; lower --val-fraction").field("--val-fraction");
  auto publish = [&](IndexedDatasetWriter& writer, const std::string& prefix) {
    writer.finish([&](const FileStamp& bin, const FileStamp& idx) {
      write_dataset_provenance(prefix,
                               {tokenizer.fingerprint(), options.tokenizer, tokenizer.vocab_size(),
                                writer.max_token_id(), writer.documents(), writer.tokens()},
                               bin, idx);
    });
  };
  publish(train, report.train_prefix);
  if (val) publish(*val, report.val_prefix);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace zaya
