#pragma once
// A Hugging Face tokenizer (tokenizer.json) that turns text into exactly the ids of the Python `tokenizers`
// library. Two families are implemented with all their options:
// - byte-level BPE (GPT-2, Llama-3, Qwen): normalizers NFC / NFD / NFKC / NFKD / Lowercase / Replace /
//   Prepend / Strip / Sequence, pre-tokenizers ByteLevel / Split / Digits / Sequence, decoder ByteLevel;
// - SentencePiece-style BPE with byte fallback (Gemma, Llama-2, Mistral): Replace and Prepend normalizers,
//   Split or Metaspace pre-tokenizers, decoders Replace / ByteFallback / Fuse / Strip / Metaspace.
// The model is BPE (vocab, merges in either form, ignore_merges, continuing_subword_prefix,
// end_of_word_suffix, unk_token, fuse_unk, byte_fallback; dropout only null or 0); added tokens honour
// special / single_word / lstrip / rstrip / normalized. Anything else in the file is an Error
// "not supported: <type>" naming the file and field, never a silently different encoding.
// The post-processor, truncation and padding of the file are not applied: ids are those of
// `encode(text, add_special_tokens=False)` without truncation, as a pretraining pipeline packs documents
// itself.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

class Tokenizer {
 public:
  // Reads and parses a tokenizer.json; every error names the file (and the field, e.g.
  // `pre_tokenizer.pretokenizers[1].type`).
  static Tokenizer load(const std::string& path);
  // `source` names the text in errors.
  static Tokenizer parse(std::string_view json, const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids of tokenizers' `Tokenizer.encode(text, add_special_tokens=False).ids`: added and special tokens
  // written in the text are recognised. Invalid UTF-8 throws Error "invalid UTF-8 at byte N" (callers add
  // the file and line). Const and thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  // encode() of each text, in parallel over the texts (OpenMP); the result does not depend on the thread
  // count. An error is that of the first failing text, prefixed with its index.
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string_view>& texts) const;

  // tokenizers' decode(ids, skip_special_tokens): ids that are not in the vocabulary are skipped.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // Of the decoding of a growing list of ids (a stream), the length of the prefix that more ids cannot
  // change: without a trailing incomplete UTF-8 character or trailing replacement characters (a character
  // whose bytes span tokens decodes to U+FFFD until its last byte arrives).
  static size_t settled_length(std::string_view decoded);

  // Largest id + 1, added tokens included.
  int64_t vocab_size() const;
  // What the tokenizer does, as a hash ("fnv1a64:<16 hex digits>"): of its JSON with the keys in order, its
  // vocabulary and its merges, so that two files differing only in layout agree. Datasets and runs record it.
  const std::string& fingerprint() const;
  // The longest token string in bytes, added tokens included: at least the bytes of text one token stands
  // for (a byte-level token's string is as long as its bytes or longer, a SentencePiece one's "▁" 3 bytes
  // for 1), unless a normalizer shortens the text first (NFC, Replace) or an lstrip/rstrip added token takes
  // the whitespace beside it. A server bounds a prompt's text with it before tokenizing.
  int64_t max_token_bytes() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string of an id (for an added token with normalized=true, its normalized form, as tokenizers'
  // id_to_token).
  std::optional<std::string> id_to_token(int32_t id) const;

  // Document-boundary tokens: the special added token with the lowest id whose content is one of
  //   eos: <eos>, </s>, <|endoftext|>, <|end_of_text|>, <|eot_id|>, <end_of_turn>, <|im_end|>, <|end|>, [EOS]
  //   bos: <bos>, <s>, <|begin_of_text|>, <|startoftext|>, [BOS]
  //   pad: <pad>, <|pad|>, [PAD], <|padding|>, <|finetune_right_pad_id|>
  // or nullopt when there is none.
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> pad_id() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zaya
