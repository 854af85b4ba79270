// SPDX-License-Identifier: MIT
// SNUG_CUBLAS_CHECK(call): throws snug::DeviceError naming the failed cuBLAS
// or cuBLASLt call (both return cublasStatus_t), its status, and the file and
// line. Only for files in cuda/ (it includes cuBLAS's header).
#pragma once
#include <cublas_v2.h>

#include <snug/base/error.h>

#define SNUG_CUBLAS_CHECK(call)                                                                                        \
  do {                                                                                                                 \
    const cublasStatus_t snug_st_ = (call);                                                                            \
    if (snug_st_ != CUBLAS_STATUS_SUCCESS)                                                                             \
      throw ::snug::DeviceError(::snug::str("cuBLAS error: ", #call, " failed with ", cublasGetStatusName(snug_st_),   \
                                            " (", cublasGetStatusString(snug_st_), ") at ", __FILE__, ":", __LINE__)); \
  } while (0)
