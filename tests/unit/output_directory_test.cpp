// An output directory: zaya writes into a directory only what it wrote there before or what the user lets it
// (--force), deletes only its own files, and leaves the directory as it was when the work is interrupted.

#include "io/output_directory.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

namespace fs = std::filesystem;

// Stages `files` (each holding `text`) in `out` and publishes them.
void write_all(OutputDirectory& out, const std::vector<std::string>& files, const std::string& text) {
  for (const std::string& name : files) test::write_bytes(out.staging() + "/" + name, text);
  out.publish();
}

std::string refusal(const std::string& dir, bool force, const std::vector<std::string>& files) {
  try {
    OutputDirectory out(dir, "--out", force, files);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OutputDirectory, AFreshDirectoryIsCreatedAndItsManifestListsWhatWasWritten) {
  test::TempDir tmp;
  const std::string dir = tmp.file("model");
  {
    OutputDirectory out(dir, "--out", false, {"config.json", "model.safetensors"});
    EXPECT_TRUE(fs::is_directory(out.staging()));
    write_all(out, {"config.json", "model.safetensors"}, "v1");
  }
  EXPECT_EQ(test::read_bytes(dir + "/config.json"), "v1");
  EXPECT_TRUE(fs::exists(dir + "/" + kOutputManifestFile));
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"config.json", "model.safetensors", kOutputManifestFile}));
}

TEST(OutputDirectory, ItsOwnFilesAreReplacedAndThoseNoLongerWrittenRemoved) {
  test::TempDir tmp;
  const std::string dir = tmp.file("model");
  {
    OutputDirectory out(dir, "--out", false, {"config.json", "model-00001-of-00002.safetensors"});
    write_all(out, {"config.json", "model-00001-of-00002.safetensors"}, "v1");
  }
  {
    OutputDirectory out(dir, "--out", false, {"config.json", "model.safetensors"});
    write_all(out, {"config.json", "model.safetensors"}, "v2");
  }
  EXPECT_EQ(test::read_bytes(dir + "/config.json"), "v2");
  EXPECT_FALSE(fs::exists(dir + "/model-00001-of-00002.safetensors"));
}

TEST(OutputDirectory, AForeignFileIsRefusedAndKeptEvenWithForce) {
  test::TempDir tmp;
  const std::string dir = tmp.file("model");
  fs::create_directories(dir);
  test::write_bytes(dir + "/notes.txt", "mine");
  const std::string message = refusal(dir, false, {"config.json"});
  EXPECT_NE(message.find("notes.txt"), std::string::npos) << message;
  EXPECT_NE(message.find("--force"), std::string::npos) << message;
  EXPECT_NE(message.find("--out"), std::string::npos) << message;
  {
    OutputDirectory out(dir, "--out", true, {"config.json"});
    write_all(out, {"config.json"}, "v1");
  }
  EXPECT_EQ(test::read_bytes(dir + "/notes.txt"), "mine");
  // The next write still refuses without --force: notes.txt is not zaya's.
  EXPECT_NE(refusal(dir, false, {"config.json"}).find("notes.txt"), std::string::npos);
}

TEST(OutputDirectory, AFileZayaWroteButSomeoneChangedSinceIsNoLongerZayas) {
  test::TempDir tmp;
  const std::string dir = tmp.file("model");
  {
    OutputDirectory out(dir, "--out", false, {"tokenizer.json"});
    write_all(out, {"tokenizer.json"}, "ours");
  }
  test::write_bytes(dir + "/tokenizer.json", "the user's edit");
  EXPECT_NE(refusal(dir, false, {"tokenizer.json"}).find("tokenizer.json"), std::string::npos);
}

TEST(OutputDirectory, ForeignWeightsALoaderWouldReadAreRefusedEvenWithForce) {
  test::TempDir tmp;
  const std::string dir = tmp.file("model");
  fs::create_directories(dir);
  test::write_bytes(dir + "/model-00001-of-00021.safetensors", "shard");
  test::write_bytes(dir + "/model.safetensors.index.json", "{}");
  const std::string message = refusal(dir, true, {"config.json", "model.safetensors"});
  EXPECT_NE(message.find("weights zaya did not write"), std::string::npos) << message;
  EXPECT_EQ(test::read_bytes(dir + "/model-00001-of-00021.safetensors"), "shard");
  // With force, a foreign file of a name zaya writes is replaced.
  {
    OutputDirectory out(dir, "--out", true,
                        {"model-00001-of-00021.safetensors", "model.safetensors.index.json"});
    write_all(out, {"model-00001-of-00021.safetensors", "model.safetensors.index.json"}, "new");
  }
  EXPECT_EQ(test::read_bytes(dir + "/model.safetensors.index.json"), "new");
}

TEST(OutputDirectory, AnUnpublishedWriteLeavesTheDirectoryAsItWas) {
  test::TempDir tmp;
  const std::string dir = tmp.file("model");
  {
    OutputDirectory out(dir, "--out", false, {"config.json"});
    write_all(out, {"config.json"}, "v1");
  }
  {
    OutputDirectory out(dir, "--out", false, {"config.json"});
    test::write_bytes(out.staging() + "/config.json", "half");
    // No publish: the command failed midway.
  }
  EXPECT_EQ(test::read_bytes(dir + "/config.json"), "v1");
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 2);  // config.json and the manifest
}

TEST(OutputDirectory, AFileInPlaceOfTheDirectoryIsRefused) {
  test::TempDir tmp;
  test::write_bytes(tmp.file("model"), "x");
  EXPECT_NE(refusal(tmp.file("model"), true, {"config.json"}).find("not a directory"), std::string::npos);
}

}  // namespace
}  // namespace zaya
