#pragma once
// What a dataset was made with, written by zaya prepare beside the dataset as PREFIX.zaya.json (Megatron's
// tools ignore it): the tokenizer's fingerprint, its vocabulary size and the largest token id, and the stamps
// of PREFIX.bin and PREFIX.idx as written, so that a dataset changed since is known as such. A run checks its
// datasets against its tokenizer with it before training: a dataset made with another tokenizer is refused,
// naming both, before the first step rather than as garbage learned.

#include <cstdint>
#include <optional>
#include <string>

namespace zaya {

class Tokenizer;
struct FileStamp;

struct DatasetProvenance {
  std::string tokenizer_fingerprint;  // Tokenizer::fingerprint()
  std::string tokenizer_path;         // as given to zaya prepare, for messages
  int64_t tokenizer_vocab = 0;
  int64_t max_token_id = -1;  // -1 for a dataset without tokens
  int64_t documents = 0, tokens = 0;
};

// PREFIX.zaya.json
std::string provenance_path(const std::string& prefix);

// Writes PREFIX.zaya.json for the dataset about to take the names PREFIX.bin and PREFIX.idx with the stamps
// `bin` and `idx` (atomically, before they do). It also records the stamps of the files they replace when
// those are zaya's, so that the dataset stays zaya's at every moment of the renames.
void write_dataset_provenance(const std::string& prefix, const DatasetProvenance& provenance,
                              const FileStamp& bin, const FileStamp& idx);

// Whether PREFIX.bin and PREFIX.idx, where they exist, are files zaya prepare wrote (or is writing) there,
// unchanged since: what zaya prepare may replace without --force.
bool dataset_files_are_zayas(const std::string& prefix);

// The provenance of the dataset at PREFIX when PREFIX.zaya.json exists and its files are the ones it
// describes; nullopt for a dataset from elsewhere (Megatron's) or one changed since. Throws Error naming the
// file when PREFIX.zaya.json is malformed.
std::optional<DatasetProvenance> read_dataset_provenance(const std::string& prefix);

// Checks the dataset at PREFIX against the tokenizer a run uses (`tokenizer_path` naming it in messages) and
// the model's vocabulary: with its provenance, that it was made with this tokenizer and its largest id fits;
// without, by reading every token when it holds at most `scan_tokens` (a larger one is checked as it is
// read). Throws Error naming the dataset and both tokenizers, or the first token outside the vocabulary.
// Returns a note for the log when the dataset has no provenance, else "".
std::string check_dataset(const std::string& prefix, const Tokenizer& tokenizer,
                          const std::string& tokenizer_path, int64_t vocab, int64_t scan_tokens);

}  // namespace zaya
