// The error check after a kernel launch, shared by the .cu files of ops/cuda (torch-free: a
// failed launch becomes a std::runtime_error naming the kernel, which the glue turns into a
// c10::Error message for the user).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace qtrain::ops::cuda {

inline void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("qtrain CUDA kernel ") + kernel + " failed: " + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ")");
  }
}

}  // namespace qtrain::ops::cuda
