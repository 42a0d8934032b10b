#pragma once
// Multiple-choice tasks in the JSON-lines layouts the field publishes them in, read into one shape: a
// context, its choices and the right one. Each layout's context and continuations are those of
// lm-evaluation-harness's task of the same family, so that scores compare:
// - hellaswag: {"ctx": str, "endings": [str, ...], "label": int or "int"}; context = ctx;
// - arc:  {"question": str, "choices": {"text": [str, ...], "label": ["A", ...]}, "answerKey": "A"};
// - mmlu: {"question": str, "choices": [str, ...], "answer": int};
//   for both, context = "Question: <question>\nAnswer:".
// A choice is scored as the continuation " <choice>" of its context.

#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

enum class TaskLayout { HellaSwag, Arc, Mmlu };

const char* layout_name(TaskLayout layout);

struct ChoiceItem {
  std::string context;
  std::vector<std::string> choices;  // as written; the continuation is " " + choice
  int64_t label = 0;                 // index of the right choice
};

struct TaskFile {
  std::string path;
  TaskLayout layout = TaskLayout::HellaSwag;
  std::vector<ChoiceItem> items;
};

// Reads every non-blank line; the layout is that of the first line, and every line must have it. Throws
// Error naming the file, the line and the field. At most `limit` items when limit > 0.
TaskFile read_task_file(const std::string& path, int64_t limit = 0);

}  // namespace zaya
