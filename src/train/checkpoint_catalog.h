#pragma once
// A run's checkpoints on disk, apart from what they hold: RUN/checkpoints/step_<N>/ directories (N in
// digits), each with checksums.json (CRC-32 of every file) and trainer_state.json; RUN/checkpoints/latest,
// a hint naming the newest. Publishing (checksums, rename into place, latest, rotation), verification, and
// the choice of the checkpoint to resume. train/checkpoint.h writes and reads their contents.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zaya {

inline constexpr const char* kCheckpointOptimizerPrefix = "optimizer";  // optimizer-<rank>-of-<ranks>...
inline constexpr const char* kCheckpointStateFile = "trainer_state.json";
inline constexpr const char* kCheckpointChecksumFile = "checksums.json";

using FileChecksums = std::vector<std::pair<std::string, std::string>>;  // file name, CRC-32 in hex

// The CRC-32 of a file, in hex.
std::string file_checksum(const std::string& path);

// Where the ranks write step N before it is published (the same path on every rank).
std::string checkpoint_temp_dir(const std::string& run_dir, int64_t step);
// Rank 0, once every rank's files are in temp_dir: checksums.json, fsync, rename to step_<N> (an existing
// step_<N>, left by an earlier life of the run, is set aside as step_<N>.replaced-<time>), `latest`, and of
// the checkpoints up to step N the newest `keep` kept.
void publish_checkpoint(const std::string& temp_dir, int64_t step, const FileChecksums& checksums,
                        const std::string& run_dir, int keep);
// The newest intact checkpoint of a run, and why it was chosen (how `latest` compares); path "" when the run
// has none. Damaged ones are reported on stderr and skipped; never deleted.
struct CheckpointChoice {
  std::string path, reason;
};
CheckpointChoice choose_checkpoint(const std::string& run_dir);
std::string find_checkpoint(const std::string& run_dir);  // choose_checkpoint's path
// Verifies the checksums, that a step_<N> directory holds step N and that its data position adds up;
// throws Error naming the file that fails.
void verify_checkpoint(const std::string& checkpoint_dir);

// The optimizer shards a checkpoint's checksums.json lists.
std::vector<std::string> listed_optimizer_shards(const std::string& checkpoint_dir);

}  // namespace zaya
