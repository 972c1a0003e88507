// hpcnn core: check macros for CUDA, cuBLAS, cuDNN and NCCL calls (for CUDA sources; each
// macro exists when its library's header is available). A failed call throws ErrorKind::device
// through core/device_error.h: the call, file:line, rank and host, and the library's message.
//   HPCNN_CUDA_CHECK(cudaMalloc(&p, n));   HPCNN_CUBLAS_CHECK(cublasSgemm(...));
//   HPCNN_CUDNN_CHECK(cudnnConvolutionForward(...));   HPCNN_NCCL_CHECK(ncclAllReduce(...));
#pragma once

#include "core/device_error.h"

#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#define HPCNN_CUDA_CHECK(call)                                                                                             \
  do {                                                                                                                     \
    const cudaError_t hpcnn_err_ = (call);                                                                                 \
    if (hpcnn_err_ != cudaSuccess) ::hpcnn::throw_device_error(#call, __FILE__, __LINE__, cudaGetErrorString(hpcnn_err_)); \
  } while (0)
#endif

#if __has_include(<cublas_v2.h>)
#include <cublas_v2.h>
#define HPCNN_CUBLAS_CHECK(call)                                                                 \
  do {                                                                                           \
    const cublasStatus_t hpcnn_err_ = (call);                                                    \
    if (hpcnn_err_ != CUBLAS_STATUS_SUCCESS)                                                     \
      ::hpcnn::throw_device_error(#call, __FILE__, __LINE__, cublasGetStatusString(hpcnn_err_)); \
  } while (0)
#endif

#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define HPCNN_CUDNN_CHECK(call)                                                                \
  do {                                                                                         \
    const cudnnStatus_t hpcnn_err_ = (call);                                                   \
    if (hpcnn_err_ != CUDNN_STATUS_SUCCESS)                                                    \
      ::hpcnn::throw_device_error(#call, __FILE__, __LINE__, cudnnGetErrorString(hpcnn_err_)); \
  } while (0)
#endif

#if __has_include(<nccl.h>)
#include <nccl.h>
#define HPCNN_NCCL_CHECK(call)                                                                                             \
  do {                                                                                                                     \
    const ncclResult_t hpcnn_err_ = (call);                                                                                \
    if (hpcnn_err_ != ncclSuccess) ::hpcnn::throw_device_error(#call, __FILE__, __LINE__, ncclGetErrorString(hpcnn_err_)); \
  } while (0)
#endif
