#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <mutex>

#include "core/error.h"
#include "io/atomic_file.h"
#include "tokenizer/added.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/document.h"
#include "tokenizer/json.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pieces.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode_text.h"

namespace zaya {
namespace {

constexpr std::array<std::string_view, 9> kEosNames = {"<eos>",           "</s>",       "<|endoftext|>",
                                                       "<|end_of_text|>", "<|eot_id|>", "<end_of_turn>",
                                                       "<|im_end|>",      "<|end|>",    "[EOS]"};
constexpr std::array<std::string_view, 5> kBosNames = {"<bos>", "<s>", "<|begin_of_text|>", "<|startoftext|>",
                                                       "[BOS]"};
constexpr std::array<std::string_view, 5> kPadNames = {"<pad>", "<|pad|>", "[PAD]", "<|padding|>",
                                                       "<|finetune_right_pad_id|>"};

// Scratch of one thread's encode calls; nothing in it outlives a call.
struct EncodeScratch {
  std::vector<tok::AddedSplit> raw_splits, normalized_splits;
  tok::NormalizedText normalized;
  std::string normalize_scratch;
  std::vector<tok::Piece> pieces;
  tok::Workspace workspace;
};

}  // namespace

struct Tokenizer::Impl {
  std::string fingerprint;
  std::unique_ptr<tok::Normalizer> normalizer;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;
  std::unique_ptr<tok::BpeModel> model;
  std::unique_ptr<tok::Decoder> decoder;
  tok::AddedVocabulary added;

  void encode(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(const tok::Piece& piece, std::vector<int32_t>& out, EncodeScratch& scratch) const;
  template <size_t N>
  std::optional<int32_t> special_named(const std::array<std::string_view, N>& names) const;
};

// tokenizers' pipeline: added tokens written as such are cut from the raw text; each piece between them is
// normalized, then added tokens are cut from the normalized text; each remaining piece is pre-tokenized and
// every pre-token goes through the model.
void Tokenizer::Impl::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (const size_t bad = unicode::find_invalid_utf8(text); bad != unicode::npos) {
    throw Error(cat("invalid UTF-8 at byte ", bad));
  }
  thread_local EncodeScratch scratch;
  scratch.raw_splits.clear();
  added.split(text, false, scratch.raw_splits);
  for (const tok::AddedSplit& raw : scratch.raw_splits) {
    if (raw.id >= 0) {
      out.push_back(raw.id);
      continue;
    }
    if (raw.end == raw.begin) continue;
    const bool at_origin = raw.begin == 0;
    tok::NormalizedText& normalized = scratch.normalized;
    normalized.text.assign(text.substr(raw.begin, raw.end - raw.begin));
    normalized.origin_len = at_origin ? unicode::sequence_length(static_cast<unsigned char>(text[0])) : 0;
    if (normalizer) normalizer->normalize(normalized, scratch.normalize_scratch);
    const tok::Piece whole{normalized.text, at_origin, normalized.origin_len};
    scratch.normalized_splits.clear();
    added.split(whole.text, true, scratch.normalized_splits);
    for (const tok::AddedSplit& split : scratch.normalized_splits) {
      if (split.id >= 0) {
        out.push_back(split.id);
      } else if (split.end > split.begin) {
        encode_piece(tok::slice(whole, split.begin, split.end), out, scratch);
      }
    }
  }
}

void Tokenizer::Impl::encode_piece(const tok::Piece& piece, std::vector<int32_t>& out,
                                   EncodeScratch& scratch) const {
  if (!pre_tokenizer) {
    model->tokenize(piece.text, out);
    return;
  }
  scratch.workspace.arena.reset();
  scratch.pieces.clear();
  pre_tokenizer->pre_tokenize(piece, scratch.pieces, scratch.workspace);
  for (const tok::Piece& word : scratch.pieces) model->tokenize(word.text, out);
}

template <size_t N>
std::optional<int32_t> Tokenizer::Impl::special_named(const std::array<std::string_view, N>& names) const {
  for (const auto& [id, token] : added.tokens()) {
    if (token.special && std::find(names.begin(), names.end(), token.content) != names.end()) return id;
  }
  return std::nullopt;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  return parse(read_text_file(path), path);
}

namespace {

// FNV-1a, 64 bits, over the document in a fixed form: the JSON (keys in order, the layout of the file gone),
// then the vocabulary and the merges in the file's order.
std::string fingerprint_of(const tok::TokenizerDocument& document) {
  uint64_t hash = 14695981039346656037ull;
  auto add = [&](std::string_view bytes) {
    for (const char c : bytes) hash = (hash ^ uint8_t(c)) * 1099511628211ull;
    hash = (hash ^ 0xffu) * 1099511628211ull;  // a separator no UTF-8 text holds
  };
  add(document.root.dump());
  if (document.vocab) {
    for (const auto& [token, id] : *document.vocab) {
      add(token);
      add(std::to_string(id));
    }
  }
  if (document.merges) {
    for (const auto& [left, right] : *document.merges) {
      add(left);
      add(right);
    }
  }
  char hex[32];
  std::snprintf(hex, sizeof hex, "fnv1a64:%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

}  // namespace

Tokenizer Tokenizer::parse(std::string_view json, const std::string& source) {
  tok::TokenizerDocument document = tok::read_tokenizer_document(json, source);
  if (!document.root.is_object()) throw Error("expected a JSON object").file(source);
  auto impl = std::make_unique<Impl>();
  impl->fingerprint = fingerprint_of(document);
  try {
    const tok::JsonField root(document.root, "", source);
    const tok::JsonField version = root["version"];
    if (!version.is_null() && version.string() != "1.0") version.fail("unknown tokenizer version");
    impl->normalizer = tok::parse_normalizer(root["normalizer"]);
    impl->pre_tokenizer = tok::parse_pre_tokenizer(root["pre_tokenizer"]);
    impl->model = std::make_unique<tok::BpeModel>(tok::parse_bpe_model(root["model"], document));
    impl->decoder = tok::parse_decoder(root["decoder"]);
    const tok::JsonField added_tokens = root["added_tokens"];
    const std::vector<tok::AddedToken> tokens = tok::parse_added_tokens(added_tokens);
    try {
      impl->added.add(tokens, *impl->model, impl->normalizer.get());
    } catch (const Error& e) {
      added_tokens.fail(e.message());
    }
  } catch (Error& e) {
    if (e.file_name().empty()) e.file(source);
    throw;
  }
  return Tokenizer(std::move(impl));
}

const std::string& Tokenizer::fingerprint() const {
  return impl_->fingerprint;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  impl_->encode(text, ids);
  return ids;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  impl_->encode(text, out);
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string_view>& texts) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  std::mutex error_mutex;
  size_t first_error = texts.size();
  std::string error_message;
  const auto count = static_cast<int64_t>(texts.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < count; ++i) {
    try {
      impl_->encode(texts[static_cast<size_t>(i)], out[static_cast<size_t>(i)]);
    } catch (const std::exception& e) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (static_cast<size_t>(i) < first_error) {
        first_error = static_cast<size_t>(i);
        error_message = e.what();
      }
    }
  }
  if (first_error < texts.size()) throw Error(cat("text ", first_error, ": ", error_message));
  return out;
}

size_t Tokenizer::settled_length(std::string_view decoded) {
  static constexpr std::string_view kReplacement = "\xef\xbf\xbd";
  size_t length = decoded.size();
  // Back up over continuation bytes to the last character's lead byte; drop it unless all its bytes are
  // there.
  size_t lead = length;
  while (lead > 0 && length - lead < 4 && (static_cast<unsigned char>(decoded[lead - 1]) & 0xc0) == 0x80)
    --lead;
  if (lead > 0) {
    const unsigned char byte = static_cast<unsigned char>(decoded[lead - 1]);
    const size_t need = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    if (length - (lead - 1) < need) length = lead - 1;
  }
  while (decoded.substr(0, length).ends_with(kReplacement)) length -= kReplacement.size();
  return length;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    const std::string* token = impl_->added.decoded(id);
    if (!token) token = impl_->model->id_to_token(id);
    if (!token) continue;
    if (skip_special_tokens && impl_->added.is_special(*token)) continue;
    tokens.push_back(*token);
  }
  if (impl_->decoder) impl_->decoder->decode_chain(tokens);
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && !impl_->decoder) text.push_back(' ');
    text += tokens[i];
  }
  return text;
}

int64_t Tokenizer::vocab_size() const {
  const auto& added = impl_->added.tokens();
  const int64_t largest_added = added.empty() ? -1 : added.rbegin()->first;
  return std::max<int64_t>(impl_->model->max_id(), largest_added) + 1;
}

int64_t Tokenizer::max_token_bytes() const {
  size_t longest = 0;
  const int64_t vocab = vocab_size();
  for (int64_t id = 0; id < vocab; ++id) {
    const std::string* token = impl_->added.decoded(int32_t(id));
    if (!token) token = impl_->model->id_to_token(int32_t(id));
    if (token) longest = std::max(longest, token->size());
  }
  return int64_t(longest);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto id = impl_->added.id_of(token)) return id;
  return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  const std::string* token = impl_->added.decoded(id);
  if (!token) token = impl_->model->id_to_token(id);
  if (!token) return std::nullopt;
  return *token;
}

std::optional<int32_t> Tokenizer::eos_id() const {
  return impl_->special_named(kEosNames);
}
std::optional<int32_t> Tokenizer::bos_id() const {
  return impl_->special_named(kBosNames);
}
std::optional<int32_t> Tokenizer::pad_id() const {
  return impl_->special_named(kPadNames);
}

}  // namespace zaya
