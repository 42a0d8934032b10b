#include "tokenizer/document.h"

#include <climits>

#include "core/error.h"
#include "io/json_input.h"

namespace zaya::tok {
namespace {

using nlohmann::json;

// Builds the document from parser events, as nlohmann's own DOM builder does, except for the values of
// model.vocab and model.merges, whose events are read into vectors.
class DocumentReader final : public nlohmann::json_sax<json> {
 public:
  explicit DocumentReader(TokenizerDocument& document) : document_(document) {}

  // The first problem found; empty while there is none.
  const std::string& error() const { return error_; }
  const std::string& error_field() const { return error_field_; }

  bool null() override { return scalar(json(nullptr)); }
  bool boolean(bool value) override { return scalar(json(value)); }
  bool number_integer(number_integer_t value) override { return scalar(json(value)); }
  bool number_float(number_float_t value, const string_t&) override { return scalar(json(value)); }
  bool binary(binary_t& value) override { return scalar(json(std::move(value))); }

  bool number_unsigned(number_unsigned_t value) override {
    if (capture_ == Capture::vocab) {
      if (value > number_unsigned_t(INT32_MAX)) return fail_vocab_entry();
      document_.vocab->emplace_back(std::move(token_), static_cast<int32_t>(value));
      return true;
    }
    return scalar(json(value));
  }

  bool string(string_t& value) override {
    if (capture_ == Capture::merges) return legacy_merge(value);
    if (capture_ == Capture::merge_pair) {
      if (pair_.size() == 2) return fail_merge();
      pair_.push_back(std::move(value));
      return true;
    }
    return scalar(json(std::move(value)));
  }

  bool start_object(std::size_t) override {
    if (capture_ == Capture::vocab_value) {
      capture_ = Capture::vocab;
      document_.vocab.emplace();
      return true;
    }
    if (capture_ != Capture::none) return fail_capture();
    if (too_deep()) return false;
    stack_.push_back(add(json::object()));
    return true;
  }

  bool key(string_t& name) override {
    if (capture_ == Capture::vocab) {
      token_ = std::move(name);
      return true;
    }
    if (stack_.size() == 1) root_key_ = name;
    if (stack_.size() == 2 && root_key_ == "model" && (name == "vocab" || name == "merges")) {
      capture_ = name == "vocab" ? Capture::vocab_value : Capture::merges_value;
      return true;
    }
    member_ = &(*stack_.back())[name];
    return true;
  }

  bool end_object() override {
    if (capture_ == Capture::vocab) {
      capture_ = Capture::none;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  bool start_array(std::size_t) override {
    if (capture_ == Capture::merges_value) {
      capture_ = Capture::merges;
      document_.merges.emplace();
      document_.merge_index.clear();
      merge_count_ = 0;
      return true;
    }
    if (capture_ == Capture::merges) {
      capture_ = Capture::merge_pair;
      pair_.clear();
      return true;
    }
    if (capture_ != Capture::none) return fail_capture();
    if (too_deep()) return false;
    stack_.push_back(add(json::array()));
    return true;
  }

  bool end_array() override {
    if (capture_ == Capture::merge_pair) {
      if (pair_.size() != 2) return fail_merge();
      document_.merges->emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      document_.merge_index.push_back(merge_count_++);
      capture_ = Capture::merges;
      return true;
    }
    if (capture_ == Capture::merges) {
      capture_ = Capture::none;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = cat("invalid JSON: ", e.what());
    return false;
  }

 private:
  // The values kept are copied and printed by recursive code: nesting is bounded as parse_json bounds it.
  bool too_deep() {
    if (int(stack_.size()) < kMaxJsonDepth) return false;
    error_ = cat("JSON nested deeper than ", kMaxJsonDepth, " levels");
    return true;
  }

  enum class Capture { none, vocab_value, vocab, merges_value, merges, merge_pair };

  // Where the next value goes: the root, the end of the open array, or the member named last.
  json* add(json&& value) {
    if (stack_.empty()) {
      document_.root = std::move(value);
      return &document_.root;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    *member_ = std::move(value);
    return member_;
  }

  bool scalar(json&& value) {
    switch (capture_) {
      case Capture::none:
        add(std::move(value));
        return true;
      case Capture::vocab:
        return fail_vocab_entry();
      case Capture::merges:
      case Capture::merge_pair:
        return fail_merge();
      default:
        return fail_capture();
    }
  }

  // The legacy form "left right": exactly one space; "#version" lines are comments of merges.txt.
  bool legacy_merge(const std::string& line) {
    const size_t index = merge_count_++;
    if (line.rfind("#version", 0) == 0) return true;
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      --merge_count_;
      return fail(cat("model.merges[", index, "]"), cat("expected \"left right\", found \"", line, "\""));
    }
    document_.merges->emplace_back(line.substr(0, space), line.substr(space + 1));
    document_.merge_index.push_back(index);
    return true;
  }

  bool fail(std::string field, std::string message) {
    error_field_ = std::move(field);
    error_ = std::move(message);
    return false;
  }
  bool fail_vocab_entry() {
    return fail(cat("model.vocab.", token_), "expected an id between 0 and 2^31 - 1");
  }
  bool fail_merge() {
    return fail(cat("model.merges[", merge_count_, "]"), "expected a pair of tokens or \"left right\"");
  }
  bool fail_capture() {
    const bool vocab = capture_ == Capture::vocab_value || capture_ == Capture::vocab;
    return vocab ? fail("model.vocab", "expected an object of token: id")
                 : fail("model.merges", "expected a list of merges");
  }

  TokenizerDocument& document_;
  std::vector<json*> stack_;  // open objects and arrays of the document
  json* member_ = nullptr;    // the object member the next value fills
  std::string root_key_;      // the top-level member being read
  Capture capture_ = Capture::none;
  std::string token_;              // vocabulary: the token whose id comes next
  std::vector<std::string> pair_;  // merges: the entry being read
  size_t merge_count_ = 0;         // merges: entries read so far
  std::string error_, error_field_;
};

}  // namespace

TokenizerDocument read_tokenizer_document(std::string_view text, const std::string& source) {
  TokenizerDocument document;
  DocumentReader reader(document);
  if (!json::sax_parse(text.data(), text.data() + text.size(), &reader)) {
    Error error(reader.error().empty() ? std::string("invalid JSON") : reader.error());
    error.file(source);
    if (!reader.error_field().empty()) error.field(reader.error_field());
    throw error;
  }
  return document;
}

}  // namespace zaya::tok
