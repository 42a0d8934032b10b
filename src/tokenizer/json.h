#pragma once
// Reading tokenizer.json: a JSON value with its path in the file, so that every complaint is one Error
// naming the file and the field (e.g. `pre_tokenizer.pretokenizers[1].type`). Internal to src/data.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/pattern.h"

namespace zaya::tok {

class JsonField {
 public:
  JsonField(const nlohmann::json& value, std::string path, const std::string& file)
      : value_(&value), path_(std::move(path)), file_(&file) {}

  const nlohmann::json& json() const { return *value_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return value_->is_null(); }

  // An object member; an absent member reads as null.
  JsonField operator[](std::string_view key) const;
  // Array access; both fail unless the value is an array.
  size_t size() const;
  JsonField at(size_t index) const;

  std::string string() const;
  std::optional<std::string> optional_string() const;  // null reads as nullopt
  bool boolean(bool if_null) const;
  uint64_t unsigned_integer() const;
  char32_t character() const;  // a string of exactly one character
  // The member "type" as a string; fails when it is missing.
  std::string type() const;

  Error error(const std::string& message) const { return Error(message).file(*file_).field(path_); }
  [[noreturn]] void fail(const std::string& message) const { throw error(message); }
  // Fails naming a field below this one that has no JsonField (e.g. "merges[3]").
  [[noreturn]] void fail_below(const std::string& relative, const std::string& message) const {
    throw Error(message).file(*file_).field(path_.empty() ? relative : path_ + "." + relative);
  }
  // "not supported: <what>", the error for a valid tokenizer.json that uses something zaya does not
  // implement.
  [[noreturn]] void unsupported(const std::string& what) const { fail("not supported: " + what); }

 private:
  void expect(bool ok, const char* expected) const;

  const nlohmann::json* value_;
  std::string path_;
  const std::string* file_;
};

// The steps of a "Sequence" component: each entry of the list `key`, read by `parse`; `what` names one step
// in the error for a null entry.
template <class Component, class Parse>
std::vector<std::unique_ptr<Component>> parse_steps(const JsonField& json, std::string_view key,
                                                    const char* what, Parse parse) {
  const JsonField list = json[key];
  std::vector<std::unique_ptr<Component>> steps;
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonField step = list.at(i);
    if (step.is_null()) step.fail(std::string("expected ") + what);
    steps.push_back(parse(step));
  }
  return steps;
}

// A SplitPattern / ReplacePattern: {"String": literal} or {"Regex": pattern}.
TextPattern parse_text_pattern(const JsonField& pattern);

}  // namespace zaya::tok
