// See comm.h.
#include "engine/dist/comm.h"

#include <algorithm>
#include <exception>
#include <thread>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "engine/dist/gloo_backend.h"
#include "engine/dist/nccl_backend.h"

namespace qtrain::engine::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Naming a failed rank]
// Gloo reports a dead peer as a socket error ("Connection reset by peer [127.0.0.1]:35557") and
// a hung one as a timeout, neither naming a rank. So a rank whose collective fails asks the
// rendezvous store, which outlives any rank under torchrun and `qtrain launch`: it answers a roll
// call ("answer/<rank>") and waits a few seconds for the others to answer theirs. A rank that
// stopped on an error of its own has left the error under "error/<rank>" (announce_failure), a
// rank that neither answered nor left an error exited without a word (killed), hangs, or is still
// busy. The error names these ranks and what this rank was doing. If the store itself is gone,
// its host (rank 0, when no agent serves it) is the one that stopped.
constexpr std::chrono::milliseconds kRollCallWait{3000};

std::string first_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string s = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

}  // namespace

// Note [Choosing the backend]
// As in PyTorch, a GPU run talks over NCCL (collectives on the GPU, over NVLink or InfiniBand
// where present) and a CPU run over Gloo (TCP). `ddp_backend: gloo` on a GPU stages every
// collective through host memory: slower, but Gloo's failures name the rank that failed (Note
// [Naming a failed rank]); NCCL's are reported by its watchdog (Note [NCCL failures]).
DdpBackend choose_backend(const std::string& ddp_backend, const at::Device& device) {
  if (ddp_backend == "gloo") return DdpBackend::gloo;
  TORCH_CHECK(ddp_backend == "auto" || ddp_backend == "nccl",
              "ddp_backend: ",
              ddp_backend,
              " is not a backend qtrain has; use auto, nccl or gloo");
  if (ddp_backend == "auto") return device.is_cuda() && nccl_built() ? DdpBackend::nccl : DdpBackend::gloo;
  TORCH_CHECK(nccl_built(),
              "ddp_backend: nccl, but this qtrain was built without CUDA, so it has no NCCL; use ddp_backend: gloo "
              "(or auto), or rebuild where nvcc and a CUDA libtorch are found");
  TORCH_CHECK(device.is_cuda(),
              "ddp_backend: nccl runs collectives on GPUs, and this run computes on ",
              device,
              "; use ddp_backend: gloo (or auto) on the CPU");
  return DdpBackend::nccl;
}

const char* backend_name(DdpBackend b) {
  return b == DdpBackend::nccl ? "NCCL" : "Gloo";
}

Comm::Comm(const DistEnv& env, std::chrono::seconds timeout, DdpBackend backend, at::Device device)
    : env_(env), timeout_(timeout), backend_kind_(backend), device_(device) {
  TORCH_CHECK(backend == DdpBackend::gloo || device.is_cuda(), "an NCCL communicator needs a GPU, not ", device);
  if (env.world_size == 1) return;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env.master_port);
  o.isServer = env.rank == 0 && !env.agent_store;
  o.numWorkers = static_cast<size_t>(env.world_size);
  o.waitWorkers = !env.agent_store;
  o.timeout = timeout_;
  try {
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
    store_ = c10::make_intrusive<c10d::PrefixStore>("qtrain/attempt_" + std::to_string(env.restart_count), tcp);
  } catch (const std::exception& e) {
    TORCH_CHECK(false,
                "rank ",
                env.rank,
                " of ",
                env.world_size,
                ": the rendezvous at ",
                where,
                o.isServer ? " (served by this rank)" : "",
                " failed within ddp_timeout (",
                timeout.count(),
                " s): ",
                first_line(e),
                ". Every rank needs the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, and all must start; a port in "
                "use needs another MASTER_PORT.");
  }
  const int rank = static_cast<int>(env.rank);
  const int world = static_cast<int>(env.world_size);
  try {
    backend_ = backend == DdpBackend::nccl ? make_nccl_backend(store_, rank, world, timeout_, device)
                                           : make_gloo_backend(store_, rank, world, timeout_, env.master_addr);
  } catch (const std::exception& e) {
    TORCH_CHECK(false,
                "rank ",
                env.rank,
                " of ",
                env.world_size,
                ": the ",
                backend_name(backend),
                " process group did not connect within ddp_timeout (",
                timeout.count(),
                " s): ",
                first_line(e),
                backend == DdpBackend::nccl
                    ? ". NCCL_DEBUG=INFO shows why; with several machines, NCCL_SOCKET_IFNAME names the interface "
                      "the ranks share."
                    : ". With several machines, set GLOO_SOCKET_IFNAME to the network interface the ranks share.");
  }
}

Comm::~Comm() {
  // NCCL's communicators are torn down explicitly on a normal exit; on the way out of an error
  // the process group's own destructor aborts them without waiting for peers.
  if (!backend_ || std::uncaught_exceptions() > 0) return;
  try {
    backend_->shutdown();
  } catch (...) {
    // Ending anyway; a peer that is gone cannot be waited for.
  }
}

at::Tensor Comm::staged(const at::Tensor& t) const {
  const at::Device where = backend_kind_ == DdpBackend::nccl ? device_ : at::Device(at::kCPU);
  return t.device() == where && t.is_contiguous() ? t : t.to(where).contiguous();
}

template <class Call>
void Comm::timed(const std::string& what, Call&& call) {
  const auto start = Clock::now();
  try {
    call();
  } catch (const std::exception& e) {
    fail(what, e);
  }
  seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

void Comm::allreduce_sum(at::Tensor& t, const std::string& what) {
  if (!backend_) return;
  timed(what, [&] {
    std::vector<at::Tensor> v = {staged(t)};
    backend_->allreduce(v)->wait();
    if (!v[0].is_same(t)) t.copy_(v[0]);
  });
}

at::Tensor Comm::allgather(const at::Tensor& t, const std::string& what) {
  std::vector<int64_t> shape = {env_.world_size};
  shape.insert(shape.end(), t.sizes().begin(), t.sizes().end());
  auto out = at::empty({env_.world_size * t.numel()}, t.options());
  allgather_into(out, t, what);
  return out.view(shape);
}

void Comm::allgather_into(at::Tensor& out, const at::Tensor& t, const std::string& what) {
  auto pending = start_allgather_into(out, t, what);
  wait(pending);
}

Comm::Pending Comm::start_allgather_into(const at::Tensor& out, const at::Tensor& t, std::string what) {
  TORCH_CHECK(out.is_contiguous() && out.numel() == env_.world_size * t.numel() && out.dtype() == t.dtype(),
              "allgather_into: the output must be contiguous ",
              t.dtype(),
              " [",
              env_.world_size * t.numel(),
              "], got ",
              out.dtype(),
              " ",
              out.sizes());
  Pending p;
  p.out = out;
  p.what = std::move(what);
  if (!backend_) {
    p.out.copy_(t.reshape({-1}));
    return p;
  }
  timed(p.what, [&] {
    p.staged_out = staged(out);
    p.inputs = {staged(t).reshape({-1})};
    p.work = backend_->_allgather_base(p.staged_out, p.inputs[0]);
  });
  return p;
}

Comm::Pending Comm::start_scatter(const at::Tensor& out, const at::Tensor& whole, int64_t root, std::string what) {
  const bool sends = env_.rank == root;
  TORCH_CHECK(root >= 0 && root < env_.world_size, "scatter: root ", root, " is not a rank of ", env_.world_size);
  TORCH_CHECK(out.is_contiguous() && (!sends || (whole.is_contiguous() && whole.dtype() == out.dtype() &&
                                                 whole.numel() == env_.world_size * out.numel())),
              "scatter: rank ",
              root,
              "'s input must be contiguous ",
              out.dtype(),
              " [",
              env_.world_size * out.numel(),
              "]");
  Pending p;
  p.out = out;
  p.what = std::move(what);
  if (!backend_) {
    p.out.copy_(whole.reshape(out.sizes()));
    return p;
  }
  timed(p.what, [&] {
    p.staged_out = staged(out);
    std::vector<at::Tensor> outputs = {p.staged_out};
    std::vector<std::vector<at::Tensor>> inputs;
    if (sends) {
      const auto flat = staged(whole).reshape({-1});
      for (int64_t r = 0; r < env_.world_size; ++r) {
        p.inputs.push_back(flat.narrow(0, r * out.numel(), out.numel()).view(out.sizes()));
      }
      inputs.push_back(p.inputs);
    }
    c10d::ScatterOptions options;
    options.rootRank = root;
    p.work = backend_->scatter(outputs, inputs, options);
  });
  return p;
}

Comm::Pending Comm::start_broadcast(const at::Tensor& t, int64_t root, std::string what) {
  TORCH_CHECK(root >= 0 && root < env_.world_size, "broadcast: root ", root, " is not a rank of ", env_.world_size);
  Pending p;
  p.out = t;
  p.what = std::move(what);
  if (!backend_) return p;
  timed(p.what, [&] {
    p.staged_out = staged(t);
    std::vector<at::Tensor> tensors = {p.staged_out};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    p.work = backend_->broadcast(tensors, options);
  });
  return p;
}

void Comm::wait(Pending& p) {
  if (!p.work) return;
  timed(p.what, [&] {
    p.work->wait();
    if (!p.staged_out.is_same(p.out)) p.out.copy_(p.staged_out);
  });
  p.work.reset();
  p.inputs.clear();
}

void Comm::barrier(const std::string& what) {
  if (!backend_) return;
  timed(what, [&] { backend_->barrier()->wait(); });
}

void Comm::announce_failure(const std::exception& e) noexcept {
  if (!store_) return;
  try {
    store_->set("error/" + std::to_string(env_.rank), bytes(first_line(e)));
  } catch (...) {
    // The store is gone too; the other ranks learn of this rank's stop from their sockets.
  }
}

void Comm::fail(const std::string& what, const std::exception& e) {
  // See Note [Naming a failed rank].
  std::string peers;
  try {
    store_->set("answer/" + std::to_string(env_.rank), bytes("1"));
    const auto wait = std::min<std::chrono::milliseconds>(kRollCallWait, timeout_);
    const auto deadline = Clock::now() + wait;
    std::vector<int64_t> silent;
    for (;;) {
      silent.clear();
      for (int64_t r = 0; r < env_.world_size; ++r) {
        const auto id = std::to_string(r);
        if (r != env_.rank && !store_->check({"answer/" + id}) && !store_->check({"error/" + id})) silent.push_back(r);
      }
      if (silent.empty() || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int64_t r = 0; r < env_.world_size; ++r) {
      const std::string key = "error/" + std::to_string(r);
      if (r == env_.rank || !store_->check({key})) continue;
      const auto msg = store_->get(key);
      peers += " Rank " + std::to_string(r) + " stopped with: " + std::string(msg.begin(), msg.end()) + ".";
    }
    for (const int64_t r : silent) {
      peers += " Rank " + std::to_string(r) + " did not answer within " + std::to_string(wait.count() / 1000) +
               " s: it exited without a message (killed?), hangs, or is still busy.";
    }
    if (peers.empty()) peers = " Every other rank is alive and reports no error of its own.";
  } catch (const std::exception&) {
    peers = " The rendezvous store at " + env_.master_addr + ":" + std::to_string(env_.master_port) +
            " is gone as well: its host (rank 0, when no torchrun agent or qtrain launch serves it) stopped.";
  }
  TORCH_CHECK(false,
              "rank ",
              env_.rank,
              " of ",
              env_.world_size,
              ": ",
              what,
              " failed: ",
              first_line(e),
              ".",
              peers,
              " See that rank's own output for its error.");
}

}  // namespace qtrain::engine::dist
