#pragma once
// Pre-tokenizers of tokenizer.json: ByteLevel, Split, Metaspace, Digits and Sequence, each cutting (and
// where it must, rewriting) text exactly as tokenizers' pre-tokenizer of the same name. Internal to src/data.

#include <memory>
#include <vector>

#include "tokenizer/pieces.h"

namespace zaya::tok {

class JsonField;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the non-empty pieces `piece` becomes. Text a step rewrites is kept in ws.arena.
  virtual void pre_tokenize(const Piece& piece, std::vector<Piece>& out, Workspace& ws) const = 0;
};

// nullptr for a null pre-tokenizer; Error "not supported: <type>" for a type zaya does not implement.
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const JsonField& json);

// Metaspace's settings, shared by the pre-tokenizer and the decoder of that name.
enum class PrependScheme { always, first, never };
struct MetaspaceOptions {
  char32_t replacement = U'\u2581';
  PrependScheme prepend_scheme = PrependScheme::always;
  bool split = true;
};
MetaspaceOptions parse_metaspace(const JsonField& json);

}  // namespace zaya::tok
