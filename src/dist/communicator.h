#pragma once
// The collectives training needs across ranks, behind one interface so that the trainer is the same on one
// process, on MPI ranks, and later on NCCL/RCCL GPU communicators. Every call is collective: all ranks
// make it, in the same order, with agreeing sizes. Counts are in elements; the implementations split
// anything too large for one call of the engine.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zaya {

// A collective that was started without waiting for it. Its buffers (and the counts it was given) must
// stay as they are until wait() returns. MPI moves a collective on only inside its own calls: progress()
// is such a call that never blocks, for the caller to make now and then while it computes something else.
// One dropped unfinished is left to the engine: that happens only on the way to an abort.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual bool progress() = 0;  // true once done
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks on this machine (for dividing its cores among them), and this one's place among them (which of
  // the machine's GPUs it takes).
  virtual int local_size() const = 0;
  virtual int local_rank() const = 0;

  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  virtual void all_reduce_sum(double* data, int64_t count) = 0;
  virtual void all_reduce_sum(int64_t* data, int64_t count) = 0;
  virtual void all_reduce_max(int64_t* data, int64_t count) = 0;
  // `send` holds counts[r] elements for each rank r, one after the other; this rank's part of the sum over
  // ranks lands in `recv` (counts[rank()] elements). send and recv must not overlap.
  void reduce_scatter_sum(const float* send, float* recv, const std::vector<int64_t>& counts) {
    start_reduce_scatter_sum(send, recv, counts)->wait();
  }
  // The same, started: several may be in flight, started in the same order on every rank.
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float* send, float* recv,
                                                                      std::vector<int64_t> counts) = 0;
  // `data` holds counts[r] elements for each rank r, one after the other; each rank's own part is read
  // from its place and every other part is filled in from its rank.
  virtual void all_gather(float* data, const std::vector<int64_t>& counts) = 0;
  // send_counts[r] elements go to rank r, taken one block after the other from `send`; recv_counts[r]
  // come from rank r into `recv` in the same way.
  virtual void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                          const std::vector<int64_t>& recv_counts) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // Every rank's string, in rank order.
  virtual std::vector<std::string> all_gather_strings(const std::string& mine) = 0;
  virtual void barrier() = 0;
  // A communicator over the ranks that pass the same color, ranked by key (collective).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Ends every rank of the job with this exit code (the caller has reported why).
  [[noreturn]] virtual void abort(int code) = 0;
};

// One process: rank 0 of 1; the collectives copy or do nothing.
std::unique_ptr<Communicator> make_single_process_communicator();

// True when this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx).
bool launched_by_mpi();
// Throws when srun started this step's several tasks without an MPI plugin (no PMI or PMIx in the
// environment: srun without --mpi on a cluster whose default is none). Each task would otherwise train
// alone, as if it were the whole job.
void refuse_tasks_without_mpi();
// MPI_COMM_WORLD; initialises MPI (funnelled threads: only the calling thread makes MPI calls) and
// finalises it when destroyed. Larger buffers than max_elements_per_call (at most 2^31 - 1, MPI's `int`
// counts) are moved in rounds; tests set it small to exercise that path.
std::unique_ptr<Communicator> make_mpi_communicator(int64_t max_elements_per_call = 2147483647);

// This machine's name (for messages that say where a rank runs, and file names).
std::string host_name();

// The elements of a collective's per-rank counts, in all.
inline int64_t total_count(const std::vector<int64_t>& counts) {
  int64_t sum = 0;
  for (const int64_t count : counts) sum += count;
  return sum;
}

// Part `index` of `total` items split into `parts` consecutive runs whose lengths differ by at most one.
struct Share {
  int64_t first = 0, count = 0;
};
Share even_share(int64_t total, int parts, int index);

// Collective: throws Error, on every rank, when some rank's `value` differs from rank 0's (`what` names it
// in the message, e.g. "the zaya version").
void require_agreement(Communicator& comm, const std::string& what, const std::string& value);

}  // namespace zaya
