// The CUDA copy engine: copies on a stream of its own (so they overlap the compute stream's
// kernels), ordered by CUDA events; see Note [Copy and compute ordering] in copy_engine.h. Host
// buffers are allocated with cudaHostAlloc rather than through torch's caching host allocator,
// which rounds every request up to a power of two (up to 2x the pinned RAM for layer blobs).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "offload/copy_engine.h"

namespace qtrain::offload {
namespace {

void check_cuda(cudaError_t status, const char* what) {
  TORCH_CHECK(status == cudaSuccess, what, " failed: ", cudaGetErrorString(status));
}

class CudaFence final : public Fence {
 public:
  explicit CudaFence(const c10::cuda::CUDAStream& stream) { event_.record(stream); }
  bool ready() const override { return event_.query(); }
  void synchronize() const override { event_.synchronize(); }
  void block(const c10::cuda::CUDAStream& stream) const { event_.block(stream); }

 private:
  mutable at::cuda::CUDAEvent event_{cudaEventDisableTiming};
};

class CudaCopyEngine final : public CopyEngine {
 public:
  explicit CudaCopyEngine(const at::Device& device)
      : device_(device), copy_stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())) {}

  at::Device device() const override { return device_; }

  at::Tensor host_buffer(int64_t bytes) override {
    void* ptr = nullptr;
    check_cuda(cudaHostAlloc(&ptr, static_cast<size_t>(std::max<int64_t>(bytes, 1)), cudaHostAllocDefault),
               "cudaHostAlloc of a pinned layer blob");
    return at::from_blob(
        ptr, {bytes}, [](void* p) { cudaFreeHost(p); }, at::TensorOptions().dtype(at::kByte));
  }

  at::Tensor device_buffer(int64_t bytes) override {
    return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device_));
  }

  FencePtr copy(const at::Tensor& src, const at::Tensor& dst, const FencePtr& after) override {
    TORCH_CHECK(src.nbytes() == dst.nbytes(), "copy of ", src.nbytes(), " bytes into a buffer of ", dst.nbytes());
    const c10::cuda::CUDAGuard guard(device_);
    if (after) static_cast<const CudaFence&>(*after).block(copy_stream_);
    check_cuda(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(), cudaMemcpyDefault, copy_stream_),
               "cudaMemcpyAsync of a layer blob or an offloaded activation");
    return std::make_shared<CudaFence>(copy_stream_);
  }

  void compute_wait(const FencePtr& fence) override {
    if (fence) static_cast<const CudaFence&>(*fence).block(c10::cuda::getCurrentCUDAStream(device_.index()));
  }

  FencePtr compute_fence() override {
    const c10::cuda::CUDAGuard guard(device_);
    return std::make_shared<CudaFence>(c10::cuda::getCurrentCUDAStream(device_.index()));
  }

 private:
  at::Device device_;
  c10::cuda::CUDAStream copy_stream_;
};

}  // namespace

std::shared_ptr<CopyEngine> make_cuda_copy_engine(const at::Device& device) {
  TORCH_CHECK(device.is_cuda(), "the CUDA copy engine needs a CUDA device, got ", device);
  TORCH_CHECK(at::hasCUDA() && device.index() < static_cast<int64_t>(at::getNumGPUs()),
              "offloading layers to ",
              device,
              " needs that GPU, but this machine has ",
              at::hasCUDA() ? at::getNumGPUs() : 0,
              "; set device: (a present GPU) or offload_layers: 0");
  return std::make_shared<CudaCopyEngine>(device.has_index() ? device : at::Device(at::kCUDA, 0));
}

}  // namespace qtrain::offload
