// communicator_check, run under an MPI launcher with any number of ranks: every collective of the MPI
// communicator against the values it must give. The communicator moves at most 5 elements per MPI call, so
// small buffers take MPI's own call and larger ones the rounds that buffers past 2^31 elements take in
// real runs. Then the device collectives of the staged communicator on the GPU emulator's memory, which
// the host cannot touch but through the device's copies (the emulator faults on any other access). Rank 0
// prints one line per check; every rank exits 1 when any check failed anywhere.

#include <cstdio>
#include <string>
#include <vector>

#include "backend/gpu/device.h"
#include "backend/ops.h"
#include "core/buffer.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"

namespace {

using zaya::Communicator;

int failures = 0;

void expect(Communicator& comm, bool passed, const std::string& what) {
  int64_t failed = passed ? 0 : 1;
  comm.all_reduce_max(&failed, 1);
  failures += int(failed);
  if (comm.rank() == 0) std::printf("%s: %s\n", failed ? "FAIL" : "ok", what.c_str());
}

std::vector<int64_t> counts_for(int ranks, int64_t base) {
  std::vector<int64_t> counts;
  for (int q = 0; q < ranks; ++q) counts.push_back(base + q);
  return counts;
}

void check_all(Communicator& comm) {
  const int P = comm.size(), r = comm.rank();

  std::vector<float> floats(13);
  std::vector<double> doubles(13);
  std::vector<int64_t> ints(13), maxima(13);
  for (int i = 0; i < 13; ++i) {
    floats[size_t(i)] = float(r) + 0.5f * float(i);
    doubles[size_t(i)] = double(r) * 0.25 + i;
    ints[size_t(i)] = r * 7 + i;
    maxima[size_t(i)] = int64_t(r) * (i + 1);
  }
  comm.all_reduce_sum(floats.data(), 13);
  comm.all_reduce_sum(doubles.data(), 13);
  comm.all_reduce_sum(ints.data(), 13);
  comm.all_reduce_max(maxima.data(), 13);
  bool sums = true;
  const int64_t rank_sum = int64_t(P) * (P - 1) / 2;
  for (int i = 0; i < 13; ++i) {
    sums &= floats[size_t(i)] == float(rank_sum) + 0.5f * float(P * i);
    sums &= doubles[size_t(i)] == 0.25 * double(rank_sum) + double(P * i);
    sums &= ints[size_t(i)] == 7 * rank_sum + int64_t(P) * i;
    sums &= maxima[size_t(i)] == int64_t(P - 1) * (i + 1);
  }
  expect(comm, sums, "all-reduce sum (f32, f64, i64) and max over 13 elements");

  for (int64_t base : {int64_t(0), int64_t(1), int64_t(4)}) {  // from one MPI call to several rounds
    const std::vector<int64_t> counts = counts_for(P, base);
    int64_t total = 0, offset = 0;
    for (int q = 0; q < P; ++q) total += counts[size_t(q)], offset += q < r ? counts[size_t(q)] : 0;
    std::vector<float> send(static_cast<size_t>(total)), recv(static_cast<size_t>(counts[size_t(r)]));
    for (int64_t j = 0; j < total; ++j) send[size_t(j)] = float(r * 100 + j);
    comm.reduce_scatter_sum(send.data(), recv.data(), counts);
    bool good = true;
    for (int64_t k = 0; k < counts[size_t(r)]; ++k)
      good &= recv[size_t(k)] == float(100 * rank_sum + P * (offset + k));
    expect(comm, good, "reduce-scatter of " + std::to_string(total) + " elements");

    std::vector<float> gathered(static_cast<size_t>(total), -1.0f);
    for (int64_t k = 0; k < counts[size_t(r)]; ++k) gathered[size_t(offset + k)] = float(r * 1000 + k);
    comm.all_gather(gathered.data(), counts);
    good = true;
    for (int q = 0, at = 0; q < P; ++q) {
      for (int64_t k = 0; k < counts[size_t(q)]; ++k) good &= gathered[size_t(at++)] == float(q * 1000 + k);
    }
    expect(comm, good, "all-gather of " + std::to_string(total) + " elements");
  }

  {
    // Three reduce-scatters in flight at once (one MPI call, then rounds), moved on while in flight and
    // completed out of order; each lands as the blocking one does.
    std::vector<std::vector<float>> sends, recvs;
    std::vector<std::vector<int64_t>> all_counts;
    std::vector<std::unique_ptr<zaya::PendingCollective>> pending;
    for (int64_t base : {int64_t(0), int64_t(3), int64_t(9)}) {
      all_counts.push_back(counts_for(P, base));
      int64_t total = 0;
      for (int64_t c : all_counts.back()) total += c;
      sends.emplace_back(static_cast<size_t>(total));
      recvs.emplace_back(static_cast<size_t>(all_counts.back()[size_t(r)]), -1.0f);
      for (int64_t j = 0; j < total; ++j) sends.back()[size_t(j)] = float(r * 10 + base + j);
    }
    for (size_t i = 0; i < sends.size(); ++i)
      pending.push_back(comm.start_reduce_scatter_sum(sends[i].data(), recvs[i].data(), all_counts[i]));
    for (auto& p : pending) p->progress();
    for (size_t i = pending.size(); i-- > 0;) pending[i]->wait();
    bool good = true;
    for (size_t i = 0; i < sends.size(); ++i) {
      const int64_t base = all_counts[i][0];
      int64_t offset = 0;
      for (int q = 0; q < r; ++q) offset += all_counts[i][size_t(q)];
      for (int64_t k = 0; k < all_counts[i][size_t(r)]; ++k)
        good &= recvs[i][size_t(k)] == float(10 * rank_sum + P * (base + offset + k));
    }
    expect(comm, good, "three reduce-scatters in flight at once");
  }

  std::vector<int64_t> send_counts, recv_counts;
  std::vector<float> send;
  for (int q = 0; q < P; ++q) {
    send_counts.push_back(r + q + 1);
    recv_counts.push_back(q + r + 1);
    for (int k = 0; k < r + q + 1; ++k) send.push_back(float(r * 100 + q * 10 + k));
  }
  std::vector<float> received;
  for (int q = 0; q < P; ++q) received.resize(received.size() + size_t(recv_counts[size_t(q)]));
  comm.all_to_all(send.data(), send_counts, received.data(), recv_counts);
  bool good = true;
  for (int s = 0, at = 0; s < P; ++s) {
    for (int k = 0; k < s + r + 1; ++k) good &= received[size_t(at++)] == float(s * 100 + r * 10 + k);
  }
  expect(comm, good, "all-to-all with counts that differ by pair");

  std::string text = r == P - 1 ? "from the last rank, 23 b" : std::string(24, '?');
  comm.broadcast(text.data(), int64_t(text.size()), P - 1);
  expect(comm, text == "from the last rank, 23 b", "broadcast of 24 bytes in rounds of 5");

  const std::vector<std::string> names = comm.all_gather_strings("rank " + std::to_string(r));
  good = int(names.size()) == P;
  for (int q = 0; q < P && good; ++q) good &= names[size_t(q)] == "rank " + std::to_string(q);
  expect(comm, good, "strings gathered in rank order");

  const std::unique_ptr<Communicator> parity = comm.split(r % 2, r);
  int64_t members = 1, rank_total = r;
  parity->all_reduce_sum(&members, 1);
  parity->all_reduce_sum(&rank_total, 1);
  int64_t want_members = 0, want_total = 0;
  for (int q = r % 2; q < P; q += 2) ++want_members, want_total += q;
  expect(comm, members == want_members && rank_total == want_total && parity->rank() == r / 2,
         "split by parity: sizes, ranks and sums within each group");

  zaya::require_agreement(comm, "a shared value", "same");
  bool refused = false;
  try {
    zaya::require_agreement(comm, "a rank's own value", std::to_string(r));
  } catch (const zaya::Error& e) {
    refused = std::string(e.what()).find("ranks disagree on a rank's own value") != std::string::npos;
  }
  expect(comm, P == 1 || refused, "disagreement refused on every rank");
}

// Host values placed in device memory, and read back.
class OnDevice {
 public:
  explicit OnDevice(const std::vector<float>& values)
      : memory_(zaya::gpu::ops().memory()),
        buffer_(values.size() * sizeof(float), memory_),
        count_(values.size()) {
    memory_.copy_from_host(buffer_.data(), values.data(), buffer_.size());
  }
  float* data() { return buffer_.as<float>(); }
  std::vector<float> host() {
    std::vector<float> values(count_);
    memory_.copy_to_host(values.data(), buffer_.data(), buffer_.size());
    return values;
  }

 private:
  zaya::MemoryResource& memory_;
  zaya::AlignedBuffer buffer_;
  size_t count_;
};

void check_staged(Communicator& comm) {
  const std::unique_ptr<zaya::DeviceCommunicator> staged =
      zaya::make_staged_communicator(comm, zaya::gpu::ops().memory());
  const int P = comm.size(), r = comm.rank();
  const int64_t rank_sum = int64_t(P) * (P - 1) / 2;

  // Two reduce-scatters in flight at once, completed out of order.
  std::vector<std::vector<int64_t>> all_counts = {counts_for(P, 2), counts_for(P, 7)};
  std::vector<OnDevice> sends, recvs;
  for (const std::vector<int64_t>& counts : all_counts) {
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    std::vector<float> send(static_cast<size_t>(total));
    for (int64_t j = 0; j < total; ++j) send[size_t(j)] = float(r * 10 + j);
    sends.emplace_back(send);
    recvs.emplace_back(std::vector<float>(static_cast<size_t>(counts[size_t(r)]), -1.0f));
  }
  std::vector<std::unique_ptr<zaya::PendingCollective>> pending;
  for (size_t i = 0; i < sends.size(); ++i)
    pending.push_back(staged->start_reduce_scatter_sum(sends[i].data(), recvs[i].data(), all_counts[i]));
  for (auto& p : pending) p->progress();
  for (size_t i = pending.size(); i-- > 0;) pending[i]->wait();
  bool good = true;
  for (size_t i = 0; i < sends.size(); ++i) {
    int64_t offset = 0;
    for (int q = 0; q < r; ++q) offset += all_counts[i][size_t(q)];
    const std::vector<float> got = recvs[i].host();
    for (int64_t k = 0; k < all_counts[i][size_t(r)]; ++k)
      good &= got[size_t(k)] == float(10 * rank_sum + P * (offset + k));
  }
  expect(comm, good, "staged: two reduce-scatters on device memory in flight at once");

  const std::vector<int64_t> counts = counts_for(P, 3);
  std::vector<float> mine;
  for (int q = 0; q < P; ++q) {
    for (int64_t k = 0; k < counts[size_t(q)]; ++k) mine.push_back(q == r ? float(q * 1000 + k) : -1.0f);
  }
  OnDevice gathered(mine);
  staged->all_gather(gathered.data(), counts);
  const std::vector<float> all = gathered.host();
  good = true;
  for (int q = 0, at = 0; q < P; ++q) {
    for (int64_t k = 0; k < counts[size_t(q)]; ++k) good &= all[size_t(at++)] == float(q * 1000 + k);
  }
  expect(comm, good, "staged: all-gather on device memory");

  std::vector<int64_t> send_counts, recv_counts;
  std::vector<float> send;
  int64_t received = 0;
  for (int q = 0; q < P; ++q) {
    send_counts.push_back(r + q + 1);
    recv_counts.push_back(q + r + 1);
    received += q + r + 1;
    for (int k = 0; k < r + q + 1; ++k) send.push_back(float(r * 100 + q * 10 + k));
  }
  OnDevice to_send(send), to_receive(std::vector<float>(static_cast<size_t>(received)));
  staged->all_to_all(to_send.data(), send_counts, to_receive.data(), recv_counts);
  const std::vector<float> got = to_receive.host();
  good = true;
  for (int s = 0, at = 0; s < P; ++s) {
    for (int k = 0; k < s + r + 1; ++k) good &= got[size_t(at++)] == float(s * 100 + r * 10 + k);
  }
  expect(comm, good, "staged: all-to-all on device memory");
}

}  // namespace

int main() {
  const std::unique_ptr<Communicator> comm = zaya::make_mpi_communicator(5);
  check_all(*comm);
  check_staged(*comm);
  if (comm->rank() == 0) std::printf("%d ranks: %s\n", comm->size(), failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
