// The ranks of a data-parallel run and the collectives they take part in, over c10d (Gloo) from
// the same libtorch; no transport of qtrain's own.
//
// A run of one (no torchrun variables; See dist_env.h) creates no store and no process group:
// every collective is the identity, so a single-process run pays nothing. Otherwise the ranks
// meet at a TCPStore at MASTER_ADDR:MASTER_PORT (served by torchrun's agent or `qtrain launch`
// when TORCHELASTIC_USE_AGENT_STORE is set, else by rank 0) under the prefix
// "qtrain/attempt_<restart>", and form a Gloo or NCCL process group (See Note [Choosing the
// backend]). Every rank must call the same collectives in the same order; See Note [Naming a
// failed rank].
#pragma once

#include <chrono>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "engine/dist/dist_env.h"

namespace qtrain::engine::dist {

enum class DdpBackend { gloo, nccl };

// `ddp_backend` ("auto", "gloo" or "nccl") for a rank computing on `device`: auto is NCCL on a GPU
// and Gloo otherwise. NCCL on the CPU, or in a build without CUDA, is an error that says so.
DdpBackend choose_backend(const std::string& ddp_backend, const at::Device& device);
const char* backend_name(DdpBackend b);

class Comm {
 public:
  // Blocks until all ranks have joined, or `timeout` (also the limit of every collective:
  // axolotl's ddp_timeout). A rendezvous that times out is an error naming the store and what
  // was missing. With NCCL, `device` is this rank's GPU, where collectives run.
  Comm(const DistEnv& env,
       std::chrono::seconds timeout,
       DdpBackend backend = DdpBackend::gloo,
       at::Device device = at::kCPU);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int64_t rank() const { return env_.rank; }
  int64_t world_size() const { return env_.world_size; }
  int64_t local_rank() const { return env_.local_rank; }
  // Rank 0: the one rank that writes files and prints progress.
  bool lead() const { return env_.rank == 0; }

  DdpBackend backend() const { return backend_kind_; }

  // `what` says what the run was doing ("summing step 12's gradients"); it goes into the error
  // when the collective fails. Tensors may live on any device: Gloo's travel through host
  // memory, NCCL's through the rank's GPU.

  // In place: every rank's `t` becomes the elementwise sum over ranks, the same bits on each.
  void allreduce_sum(at::Tensor& t, const std::string& what);
  // [world_size, t.sizes()...]: row r is rank r's `t`. Every rank's `t` has the same shape and dtype.
  at::Tensor allgather(const at::Tensor& t, const std::string& what);
  // The same into `out`, contiguous with world_size * t.numel() elements of t's dtype: rank r's `t`
  // lands at [r * t.numel(), (r + 1) * t.numel()). With NCCL and `out` on the rank's GPU the
  // gather writes there directly (a sharded layer into its device slot).
  void allgather_into(at::Tensor& out, const at::Tensor& t, const std::string& what);

  // A collective started: it runs while the caller goes on (on Gloo's threads, or on NCCL's
  // stream) and has landed in its output once wait() returns for it (with NCCL: for the work the
  // current stream enqueues after). Every rank starts the same collectives in the same order.
  class Pending {
   private:
    friend class Comm;
    c10::intrusive_ptr<c10d::Work> work;  // null in a run of one: already done
    at::Tensor out, staged_out;
    std::vector<at::Tensor> inputs;  // kept alive until the collective has read them
    std::string what;
  };
  // allgather_into, started.
  Pending start_allgather_into(const at::Tensor& out, const at::Tensor& t, std::string what);
  // Rank `root`'s `whole` (contiguous, world_size * out.numel() elements of out's dtype; the
  // other ranks pass an undefined tensor) cut into world_size equal parts: part r lands in rank
  // r's `out`, started.
  Pending start_scatter(const at::Tensor& out, const at::Tensor& whole, int64_t root, std::string what);
  // Rank `root`'s `t` into every other rank's `t` (the same shape and dtype on every rank), started.
  Pending start_broadcast(const at::Tensor& t, int64_t root, std::string what);
  void wait(Pending& pending);
  void barrier(const std::string& what);

  // Tells the other ranks why this one is about to stop: the first line of `e`'s message (they
  // quote it when their next collective fails). Never throws: it runs while `e` is on its way out.
  void announce_failure(const std::exception& e) noexcept;

  // Seconds spent inside collectives since construction.
  double seconds() const { return seconds_; }

 private:
  [[noreturn]] void fail(const std::string& what, const std::exception& e);
  // `t` where this backend's collectives read and write it, contiguous: `t` itself when it is.
  at::Tensor staged(const at::Tensor& t) const;
  // Runs `call` (starting a collective or waiting for one) with its time added to seconds(); an
  // exception from it goes to fail(what, ...). Defined in comm.cpp, its only user.
  template <class Call>
  void timed(const std::string& what, Call&& call);

  DistEnv env_;
  std::chrono::milliseconds timeout_;
  DdpBackend backend_kind_;
  at::Device device_;
  c10::intrusive_ptr<c10d::Store> store_;  // null in a run of one
  c10::intrusive_ptr<c10d::Backend> backend_;
  double seconds_ = 0;
};

}  // namespace qtrain::engine::dist
