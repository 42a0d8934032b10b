#include "data/dataset_provenance.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "io/atomic_file.h"
#include "io/file_stamp.h"
#include "io/json_input.h"
#include "tokenizer/tokenizer.h"

namespace zaya {
using nlohmann::json;

namespace {

json stamp_json(const FileStamp& stamp) {
  return {{"bytes", stamp.bytes}, {"modified_ns", stamp.modified_ns}};
}

FileStamp stamp_from(const json& recorded, const std::string& path) {
  return {json_int64(recorded.at("bytes"), path, "bytes"),
          json_int64(recorded.at("modified_ns"), path, "modified_ns")};
}

// PREFIX.zaya.json parsed; nullopt when there is none. Throws Error naming it when it cannot be read.
std::optional<json> read_record(const std::string& prefix) {
  const std::string path = provenance_path(prefix);
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return std::nullopt;
  return parse_json(read_text_file(path), path);
}

}  // namespace

std::string provenance_path(const std::string& prefix) {
  return prefix + ".zaya.json";
}

bool dataset_files_are_zayas(const std::string& prefix) {
  try {
    const std::optional<json> record = read_record(prefix);
    if (!record) return false;
    for (const std::string name : {"bin", "idx"}) {
      const std::string file = prefix + "." + name;
      const std::optional<FileStamp> stamp = file_stamp(file);
      if (!stamp) continue;
      bool known = stamp_from(record->at("files").at(name), file) == *stamp;
      if (record->contains("replaces") && record->at("replaces").contains(name))
        known = known || stamp_from(record->at("replaces").at(name), file) == *stamp;
      if (!known) return false;
    }
  } catch (const std::exception&) {  // a record that cannot be read vouches for nothing
    return false;
  }
  return true;
}

void write_dataset_provenance(const std::string& prefix, const DatasetProvenance& p, const FileStamp& bin,
                              const FileStamp& idx) {
  json out = {{"written_by", cat("zaya ", ZAYA_VERSION)},
              {"tokenizer",
               {{"fingerprint", p.tokenizer_fingerprint},
                {"path", p.tokenizer_path},
                {"vocab_size", p.tokenizer_vocab}}},
              {"max_token_id", p.max_token_id},
              {"documents", p.documents},
              {"tokens", p.tokens},
              {"files", {{"bin", stamp_json(bin)}, {"idx", stamp_json(idx)}}}};
  // The dataset's files of before, while they are still in place: a run killed between the renames leaves a
  // dataset that is still known as zaya's, and so can be written again.
  if (dataset_files_are_zayas(prefix)) {
    out["replaces"] = json::object();
    for (const std::string name : {"bin", "idx"}) {
      if (const std::optional<FileStamp> stamp = file_stamp(prefix + "." + name))
        out["replaces"][name] = stamp_json(*stamp);
    }
  }
  write_file_atomic(provenance_path(prefix), out.dump(2) + "\n");
}

std::optional<DatasetProvenance> read_dataset_provenance(const std::string& prefix) {
  const std::string path = provenance_path(prefix);
  const std::optional<json> record = read_record(prefix);
  if (!record) return std::nullopt;
  DatasetProvenance p;
  try {
    const json& doc = *record;
    for (const std::string name : {"bin", "idx"}) {
      // Changed since, or not yet in place: the record does not describe the dataset there.
      if (file_stamp(prefix + "." + name) != stamp_from(doc.at("files").at(name), path)) return std::nullopt;
    }
    const json& tokenizer = doc.at("tokenizer");
    p.tokenizer_fingerprint = tokenizer.at("fingerprint").get<std::string>();
    p.tokenizer_path = tokenizer.at("path").get<std::string>();
    p.tokenizer_vocab = json_int64(tokenizer.at("vocab_size"), path, "tokenizer.vocab_size");
    p.max_token_id = json_int64(doc.at("max_token_id"), path, "max_token_id");
    p.documents = json_int64(doc.at("documents"), path, "documents");
    p.tokens = json_int64(doc.at("tokens"), path, "tokens");
  } catch (const json::exception& e) {
    throw Error(cat("malformed: ", e.what())).file(path);
  }
  return p;
}

std::string check_dataset(const std::string& prefix, const Tokenizer& tokenizer,
                          const std::string& tokenizer_path, int64_t vocab, int64_t scan_tokens) {
  if (const std::optional<DatasetProvenance> p = read_dataset_provenance(prefix)) {
    if (p->tokenizer_fingerprint != tokenizer.fingerprint()) {
      throw Error(cat("was prepared with the tokenizer ", p->tokenizer_path, " (", p->tokenizer_fingerprint,
                      "), not with this run's ", tokenizer_path, " (", tokenizer.fingerprint(),
                      "): its token ids mean other text"))
          .file(prefix);
    }
    if (p->max_token_id >= vocab) {
      throw Error(cat("holds token id ", p->max_token_id, ", outside the model's vocabulary of ", vocab))
          .file(prefix);
    }
    return "";
  }
  const IndexedDataset data(prefix);
  if (data.total_tokens() > scan_tokens) {
    return cat(prefix, ": no record of its tokenizer (not made by zaya prepare, or changed since); its ",
               data.total_tokens(), " tokens are checked against the vocabulary as they are read");
  }
  std::vector<int32_t> tokens;
  for (int64_t s = 0; s < data.sequence_count(); ++s) {
    tokens.resize(size_t(data.sequence_length(s)));
    data.read(s, 0, int64_t(tokens.size()), tokens.data(), vocab);
  }
  return cat(prefix, ": no record of its tokenizer (not made by zaya prepare, or changed since); its ",
             data.total_tokens(), " tokens were read and fit the vocabulary");
}

}  // namespace zaya
