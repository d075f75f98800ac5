// See data_parallel.h.
#include "engine/train/data_parallel.h"

#include <cstring>
#include <map>

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>

namespace qtrain::engine::train {

StepShare step_share(const dist::Comm& comm, int64_t accumulation) {
  return {comm.rank() * accumulation, accumulation};
}

at::Device rank_device(const at::Device& resolved, const std::string& device_key, const dist::DistEnv& env) {
  if (env.world_size == 1 || !resolved.is_cuda()) return resolved;
  TORCH_CHECK(device_key == "auto" || device_key == "cuda",
              "device: ",
              device_key,
              " would put all ",
              env.world_size,
              " ranks on one GPU; use device: cuda (or auto), and each rank takes the GPU of its LOCAL_RANK");
  const int64_t gpus = at::detail::getCUDAHooks().deviceCount();
  TORCH_CHECK(env.local_rank < gpus,
              "rank ",
              env.rank,
              " has LOCAL_RANK=",
              env.local_rank,
              " but this machine shows ",
              gpus,
              " GPU(s); start at most that many ranks per machine (torchrun --nproc-per-node, qtrain launch --nproc)");
  return {at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank)};
}

void sum_gradients(dist::Comm& comm, const std::vector<at::Tensor>& params, const std::string& what) {
  if (comm.world_size() == 1) return;
  // One flat buffer per dtype, in parameter order (a map keeps the dtypes in one order on every rank).
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& p : params) by_dtype[p.scalar_type()].push_back(p);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> flat;
    for (const auto& p : group)
      flat.push_back(p.grad().defined() ? p.grad().reshape(-1) : at::zeros({p.numel()}, p.options()));
    auto buffer = at::cat(flat);
    comm.allreduce_sum(buffer, what);
    int64_t offset = 0;
    for (const auto& p : group) {
      auto summed = buffer.narrow(0, offset, p.numel()).view(p.sizes());
      offset += p.numel();
      if (p.grad().defined()) {
        p.mutable_grad().copy_(summed);
      } else {
        p.mutable_grad() = summed.clone();
      }
    }
  }
}

std::vector<double> sum_over_ranks(dist::Comm& comm, const std::vector<double>& values, const std::string& what) {
  if (comm.world_size() == 1) return values;
  auto t = at::tensor(values, at::kDouble);
  comm.allreduce_sum(t, what);
  return {t.data_ptr<double>(), t.data_ptr<double>() + t.numel()};
}

std::string text_from_rank0(dist::Comm& comm, const std::string& text, const std::string& what) {
  if (comm.world_size() == 1) return text;
  auto size = at::full({1}, comm.lead() ? static_cast<int64_t>(text.size()) : 0, at::kLong);
  auto sent = comm.start_broadcast(size, 0, what);
  comm.wait(sent);
  const int64_t n = size.item<int64_t>();
  if (n == 0) return {};
  auto bytes = at::empty({n}, at::kByte);
  if (comm.lead()) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  sent = comm.start_broadcast(bytes, 0, what);
  comm.wait(sent);
  return {static_cast<const char*>(bytes.const_data_ptr()), static_cast<size_t>(n)};
}

std::vector<at::Tensor> gather_states(dist::Comm& comm, const at::Tensor& state, const std::string& what) {
  const auto all = comm.allgather(state, what);
  std::vector<at::Tensor> out;
  for (int64_t r = 0; r < comm.world_size(); ++r) out.push_back(all[r].clone());
  return out;
}

RankConsole::RankConsole(const dist::Comm& comm) : out_(comm.lead() ? stdout : std::fopen("/dev/null", "w")) {
  TORCH_CHECK(out_ != nullptr, "rank ", comm.rank(), ": cannot open /dev/null for its quiet console");
}

RankConsole::~RankConsole() {
  if (out_ != stdout) std::fclose(out_);
}

}  // namespace qtrain::engine::train
