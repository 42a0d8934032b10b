// Communicators over MPI: MPI_COMM_WORLD and groups split from it. MPI counts are `int`: buffers past that
// (or past a smaller limit set for testing) are moved in rounds.

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <numeric>

#include "core/error.h"
#include "dist/communicator.h"

namespace zaya {
namespace {

std::vector<int> to_int(const std::vector<int64_t>& values) {
  return {values.begin(), values.end()};
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), int64_t(0));
  return offsets;
}

// Nonblocking MPI requests with what they read until they complete (MPI keeps pointers to the counts).
class MpiPending final : public PendingCollective {
 public:
  bool progress() override {
    int done = 0;
    MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    return done != 0;
  }
  void wait() override { MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE); }

  std::vector<MPI_Request> requests;
  std::vector<std::vector<int>> counts;     // [requests][ranks]
  std::vector<std::vector<float>> staging;  // [requests][packed parts], when moved in rounds
};

class MpiCommunicator final : public Communicator {
 public:
  // The world: initialises MPI, and finalises it when destroyed.
  explicit MpiCommunicator(int64_t limit) : comm_(MPI_COMM_WORLD), world_(true), limit_(limit) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (provided < MPI_THREAD_FUNNELED) throw Error("the MPI library does not support threads (funnelled)");
    describe();
  }
  // A group split from another; MPI stays up while the world communicator lives.
  MpiCommunicator(MPI_Comm comm, int64_t limit) : comm_(comm), world_(false), limit_(limit) { describe(); }
  ~MpiCommunicator() override {
    if (world_) {
      MPI_Finalize();
    } else {
      MPI_Comm_free(&comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  int local_rank() const override { return local_rank_; }

  void all_reduce_sum(float* data, int64_t count) override { all_reduce(data, count, MPI_FLOAT, MPI_SUM); }
  void all_reduce_sum(double* data, int64_t count) override { all_reduce(data, count, MPI_DOUBLE, MPI_SUM); }
  void all_reduce_sum(int64_t* data, int64_t count) override {
    all_reduce(data, count, MPI_INT64_T, MPI_SUM);
  }
  void all_reduce_max(int64_t* data, int64_t count) override {
    all_reduce(data, count, MPI_INT64_T, MPI_MAX);
  }

  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float* send, float* recv,
                                                              std::vector<int64_t> counts) override {
    check_counts(counts);
    auto pending = std::make_unique<MpiPending>();
    if (total_count(counts) <= limit_) {
      pending->counts.push_back(to_int(counts));
      pending->requests.emplace_back();
      MPI_Ireduce_scatter(send, recv, pending->counts.back().data(), MPI_FLOAT, MPI_SUM, comm_,
                          &pending->requests.back());
      return pending;
    }
    // In rounds: each reduces up to `step` elements of every rank's part, packed together.
    const std::vector<int64_t> offsets = offsets_of(counts);
    const int64_t longest = *std::max_element(counts.begin(), counts.end());
    const int64_t step = std::max<int64_t>(1, limit_ / size_);
    const size_t rounds = size_t((longest + step - 1) / step);
    pending->counts.resize(rounds);
    pending->staging.resize(rounds);
    pending->requests.resize(rounds);
    for (size_t i = 0; i < rounds; ++i) {
      const int64_t start = int64_t(i) * step;
      std::vector<float>& staging = pending->staging[i];
      for (size_t r = 0; r < counts.size(); ++r) {
        const int64_t n = std::clamp<int64_t>(counts[r] - start, 0, step);
        pending->counts[i].push_back(int(n));
        staging.insert(staging.end(), send + offsets[r] + start, send + offsets[r] + start + n);
      }
      MPI_Ireduce_scatter(staging.data(), recv + start, pending->counts[i].data(), MPI_FLOAT, MPI_SUM, comm_,
                          &pending->requests[i]);
    }
    return pending;
  }

  void all_gather(float* data, const std::vector<int64_t>& counts) override {
    check_counts(counts);
    const std::vector<int64_t> offsets = offsets_of(counts);
    if (total_count(counts) <= limit_) {
      MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, to_int(counts).data(), to_int(offsets).data(),
                     MPI_FLOAT, comm_);
      return;
    }
    for (int r = 0; r < size_; ++r)
      broadcast(data + offsets[size_t(r)], counts[size_t(r)] * int64_t(sizeof(float)), r);
  }

  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    check_counts(send_counts);
    check_counts(recv_counts);
    if (total_count(send_counts) > INT_MAX || total_count(recv_counts) > INT_MAX)
      throw Error("an all-to-all of more than 2^31 - 1 elements per rank is not supported");
    MPI_Alltoallv(send, to_int(send_counts).data(), to_int(offsets_of(send_counts)).data(), MPI_FLOAT, recv,
                  to_int(recv_counts).data(), to_int(offsets_of(recv_counts)).data(), MPI_FLOAT, comm_);
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    char* cursor = static_cast<char*>(data);
    for (int64_t done = 0; done < bytes; done += limit_) {
      MPI_Bcast(cursor + done, int(std::min(limit_, bytes - done)), MPI_BYTE, root, comm_);
    }
  }

  std::vector<std::string> all_gather_strings(const std::string& mine) override {
    std::vector<int64_t> lengths(size_t(size_), 0);
    lengths[size_t(rank_)] = int64_t(mine.size());
    all_reduce_sum(lengths.data(), size_);
    std::vector<int64_t> offsets = offsets_of(lengths);
    std::string all(size_t(total_count(lengths)), '\0');
    std::copy(mine.begin(), mine.end(), all.begin() + offsets[size_t(rank_)]);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all.data(), to_int(lengths).data(),
                   to_int(offsets).data(), MPI_CHAR, comm_);
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r)
      out.push_back(all.substr(size_t(offsets[size_t(r)]), size_t(lengths[size_t(r)])));
    return out;
  }

  void barrier() override { MPI_Barrier(comm_); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm group;
    MPI_Comm_split(comm_, color, key, &group);
    return std::make_unique<MpiCommunicator>(group, limit_);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);  // the whole job, whichever group this is
    std::exit(code);
  }

 private:
  void describe() {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm local;
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_free(&local);
  }
  void all_reduce(void* data, int64_t count, MPI_Datatype type, MPI_Op op) {
    int element = 0;
    MPI_Type_size(type, &element);
    char* cursor = static_cast<char*>(data);
    for (int64_t done = 0; done < count; done += limit_) {
      MPI_Allreduce(MPI_IN_PLACE, cursor + done * element, int(std::min(limit_, count - done)), type, op,
                    comm_);
    }
  }
  void check_counts(const std::vector<int64_t>& counts) const {
    if (int64_t(counts.size()) != size_)
      throw Error(cat("a collective got ", counts.size(), " counts for ", size_, " ranks"));
  }

  MPI_Comm comm_;
  bool world_;
  int64_t limit_;  // elements (bytes for broadcasts) per MPI call
  int rank_ = 0, size_ = 1, local_size_ = 1, local_rank_ = 0;
};

}  // namespace

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK"}) {
    if (std::getenv(name)) return true;
  }
  return false;
}

void refuse_tasks_without_mpi() {
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");  // set by srun for the tasks of a step
  if (launched_by_mpi() || !tasks || std::strtoll(tasks, nullptr, 10) <= 1) return;
  throw Error(cat("srun started ", tasks,
                  " tasks without MPI (no PMI or PMIx in their environment), so each would train alone: run "
                  "srun with --mpi=pmix (`srun --mpi=list` shows what this cluster has)"));
}

std::unique_ptr<Communicator> make_mpi_communicator(int64_t max_elements_per_call) {
  if (max_elements_per_call < 1 || max_elements_per_call > INT_MAX)
    throw Error(cat("an MPI call moves 1 to ", INT_MAX, " elements, not ", max_elements_per_call));
  return std::make_unique<MpiCommunicator>(max_elements_per_call);
}

}  // namespace zaya
