#include "tokenizer/json.h"

#include "tokenizer/unicode_text.h"

namespace zaya::tok {
namespace {

const char* type_name(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      return "a number";
    default:
      return "an unexpected value";
  }
}

const nlohmann::json& null_json() {
  static const nlohmann::json null_value;
  return null_value;
}

}  // namespace

void JsonField::expect(bool ok, const char* expected) const {
  if (!ok) fail(cat("expected ", expected, ", found ", type_name(*value_)));
}

JsonField JsonField::operator[](std::string_view key) const {
  const std::string child_path = path_.empty() ? std::string(key) : cat(path_, ".", key);
  if (value_->is_null()) return JsonField(null_json(), child_path, *file_);
  expect(value_->is_object(), "an object");
  const auto it = value_->find(key);
  return JsonField(it == value_->end() ? null_json() : *it, child_path, *file_);
}

size_t JsonField::size() const {
  expect(value_->is_array(), "an array");
  return value_->size();
}

JsonField JsonField::at(size_t index) const {
  expect(value_->is_array(), "an array");
  return JsonField((*value_)[index], cat(path_, "[", index, "]"), *file_);
}

std::string JsonField::string() const {
  expect(value_->is_string(), "a string");
  return value_->get<std::string>();
}

std::optional<std::string> JsonField::optional_string() const {
  if (value_->is_null()) return std::nullopt;
  return string();
}

bool JsonField::boolean(bool if_null) const {
  if (value_->is_null()) return if_null;
  expect(value_->is_boolean(), "a boolean");
  return value_->get<bool>();
}

uint64_t JsonField::unsigned_integer() const {
  expect(value_->is_number_unsigned(), "a non-negative integer");
  return value_->get<uint64_t>();
}

char32_t JsonField::character() const {
  const std::string text = string();
  if (text.empty() || unicode::sequence_length(static_cast<unsigned char>(text[0])) != text.size()) {
    fail(cat("expected a single character, found \"", text, "\""));
  }
  return unicode::decode_at(text, 0);
}

std::string JsonField::type() const {
  const JsonField tag = (*this)["type"];
  if (tag.is_null()) tag.fail("missing");
  return tag.string();
}

TextPattern parse_text_pattern(const JsonField& pattern) {
  const JsonField literal = pattern["String"];
  const JsonField regex = pattern["Regex"];
  if (literal.is_null() == regex.is_null()) pattern.fail("expected {\"String\": ...} or {\"Regex\": ...}");
  if (!literal.is_null()) return TextPattern::literal(literal.string());
  const std::string source = regex.string();
  try {
    return TextPattern::regex(source);
  } catch (const Error& e) {
    regex.fail(e.message());
  }
}

}  // namespace zaya::tok
