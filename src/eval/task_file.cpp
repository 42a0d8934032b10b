#include "eval/task_file.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_input.h"

namespace zaya {

const char* layout_name(TaskLayout layout) {
  switch (layout) {
    case TaskLayout::HellaSwag:
      return "hellaswag";
    case TaskLayout::Arc:
      return "arc";
    case TaskLayout::Mmlu:
      return "mmlu";
  }
  return "?";
}

namespace {

using json = nlohmann::json;

// Errors of one line: "line N: <message>" with the field.
struct LineReader {
  const std::string& path;
  int64_t line = 0;

  [[noreturn]] void fail(const std::string& field, const std::string& message) const {
    throw Error(cat("line ", line, ": ", message)).file(path).field(field);
  }
  const json& member(const json& object, const char* field) const {
    const auto it = object.find(field);
    if (it == object.end()) fail(field, "missing");
    return *it;
  }
  std::string string(const json& value, const std::string& field) const {
    if (!value.is_string()) fail(field, "must be a string");
    return value.get<std::string>();
  }
  std::vector<std::string> strings(const json& value, const std::string& field) const {
    if (!value.is_array() || value.empty()) fail(field, "must be a non-empty list of strings");
    std::vector<std::string> out;
    for (size_t i = 0; i < value.size(); ++i) out.push_back(string(value[i], cat(field, "[", i, "]")));
    return out;
  }
  int64_t index(const json& value, const std::string& field, size_t choices) const {
    int64_t index = -1;
    if (value.is_number_integer()) {
      index = value.get<int64_t>();
    } else if (value.is_string()) {
      const std::string text = value.get<std::string>();
      if (!text.empty() && text.size() < 10 && text.find_first_not_of("0123456789") == std::string::npos)
        index = std::stoll(text);
    }
    if (index < 0 || index >= int64_t(choices))
      fail(field, cat("must be the index of one of the ", choices, " choices, got ", value.dump()));
    return index;
  }
};

TaskLayout layout_of(const json& doc, const LineReader& reader) {
  if (doc.contains("ctx") && doc.contains("endings")) return TaskLayout::HellaSwag;
  if (doc.contains("question") && doc.contains("answerKey")) return TaskLayout::Arc;
  if (doc.contains("question") && doc.contains("answer")) return TaskLayout::Mmlu;
  reader.fail("",
              "not a task layout zaya knows: expected ctx + endings + label (hellaswag), question + "
              "choices + answerKey (arc) or question + choices + answer (mmlu)");
}

ChoiceItem read_item(const json& doc, TaskLayout layout, const LineReader& r) {
  ChoiceItem item;
  switch (layout) {
    case TaskLayout::HellaSwag:
      item.context = r.string(r.member(doc, "ctx"), "ctx");
      item.choices = r.strings(r.member(doc, "endings"), "endings");
      item.label = r.index(r.member(doc, "label"), "label", item.choices.size());
      break;
    case TaskLayout::Arc: {
      item.context = "Question: " + r.string(r.member(doc, "question"), "question") + "\nAnswer:";
      const json& choices = r.member(doc, "choices");
      if (!choices.is_object()) r.fail("choices", "must be an object with text and label lists");
      item.choices = r.strings(r.member(choices, "text"), "choices.text");
      const std::vector<std::string> labels = r.strings(r.member(choices, "label"), "choices.label");
      if (labels.size() != item.choices.size())
        r.fail("choices.label", cat("has ", labels.size(), " labels for ", item.choices.size(), " texts"));
      const std::string key = r.string(r.member(doc, "answerKey"), "answerKey");
      const auto found = std::find(labels.begin(), labels.end(), key);
      if (found == labels.end()) r.fail("answerKey", cat("\"", key, "\" is not one of choices.label"));
      item.label = found - labels.begin();
      break;
    }
    case TaskLayout::Mmlu:
      item.context = "Question: " + r.string(r.member(doc, "question"), "question") + "\nAnswer:";
      item.choices = r.strings(r.member(doc, "choices"), "choices");
      item.label = r.index(r.member(doc, "answer"), "answer", item.choices.size());
      break;
  }
  return item;
}

}  // namespace

TaskFile read_task_file(const std::string& path, int64_t limit) {
  TaskFile task;
  task.path = path;
  std::istringstream lines(read_text_file(path));
  LineReader reader{path};
  std::string text;
  while (std::getline(lines, text) && (limit <= 0 || int64_t(task.items.size()) < limit)) {
    ++reader.line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json doc = parse_json(text, path, cat("line ", reader.line, ": "));
    if (!doc.is_object()) reader.fail("", "must be a JSON object");
    if (task.items.empty()) task.layout = layout_of(doc, reader);
    task.items.push_back(read_item(doc, task.layout, reader));
  }
  if (task.items.empty()) throw Error("holds no task items").file(path);
  return task;
}

}  // namespace zaya
