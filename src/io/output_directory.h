#pragma once
// A directory a command writes its files into (a model directory: zaya export, zaya init), so that nothing a
// user put there is lost. zaya lists what it wrote in the directory's manifest (zaya_manifest.json: each
// file's size and modification time), and a later write replaces only those files, and only while they are
// as zaya left them. A directory holding anything else is refused before the work begins, unless the user
// forces it; even then only the files zaya writes are replaced, nothing else is deleted, and a weight file of
// someone else's that a loader would read in place of the new model's is refused.
//
// The files are written into a staging directory inside it first and moved in once all are whole, so that an
// interrupted write leaves the directory as it was (and the staging directory, which the next claim removes).

#include <string>
#include <vector>

namespace zaya {

inline constexpr const char* kOutputManifestFile = "zaya_manifest.json";

class OutputDirectory {
 public:
  // Claims `dir` (the value of command-line option `option`) for writing `files` (names in it): the directory
  // is absent, empty, or holds only files zaya wrote there and that are unchanged since; otherwise throws
  // Error naming the option and a file that is not zaya's, unless `force`. Even then, a weight file
  // (*.safetensors, model.safetensors.index.json) that is not zaya's and not among `files` is refused: a
  // loader could read it in place of the new model's. Creates the directory and an empty staging directory
  // in it.
  OutputDirectory(std::string dir, std::string option, bool force, std::vector<std::string> files);
  ~OutputDirectory();  // removes the staging directory unless published
  OutputDirectory(const OutputDirectory&) = delete;
  OutputDirectory& operator=(const OutputDirectory&) = delete;

  // Where the command writes its files.
  const std::string& staging() const { return staging_; }

  // Moves the staged files (those claimed, each now written) into the directory, replacing files of the same
  // names, removes the files zaya wrote there before that are not among them, and writes the manifest.
  void publish();

 private:
  std::string dir_, staging_;
  std::vector<std::string> files_;  // what the command writes
  std::vector<std::string> ours_;   // files zaya wrote here before, unchanged since
  bool published_ = false;
};

}  // namespace zaya
