// The umbrella header: #include <snug/snug.h> gives the public API.
//
// Paths are relative to the source root (in the build tree) or to
// <prefix>/include/snug (installed); snug::snug puts both on the include path.
// Headers for one part only (e.g. "memory/allocator.h") may be included
// directly. Internal headers (core/cpu_*.h, core/backend.h, memory/caching_*.h,
// cuda/check.h) are not part of this list.
#pragma once

// core: tensors and what they are made of
#include "core/error.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "core/generator.h"

// memory: the caching allocator's public face
#include "memory/allocator.h"
#include "memory/settings.h"
#include "memory/stats.h"
#include "memory/history.h"
#include "memory/stream.h"

// autograd: differentiable ops, grad mode, backward, gradcheck
#include "autograd/ops.h"
#include "autograd/grad_mode.h"
#include "autograd/autocast.h"
#include "autograd/node.h"
#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/checkpoint.h"

// serialization, nn (modules, layers, optimizers, models) and data
#include "core/safetensors.h"
#include "nn/module.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/conv.h"
#include "nn/attention.h"
#include "nn/init.h"
#include "nn/optim/optimizer.h"
#include "nn/amp/grad_scaler.h"
#include "nn/checkpoint.h"
#include "nn/checkpoint_sequential.h"
#include "nn/planner.h"
#include "nn/accumulate.h"
#include "nn/models/gpt.h"
#include "nn/models/cnn.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/collate.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "data/cifar.h"
#include "data/text.h"
#include "data/token_file.h"
#include "data/chunked.h"

// parallel: layer placement across devices and pipelined micro-batches
#include "parallel/layer_stack.h"
#include "parallel/placement.h"
#include "parallel/pipeline.h"

// distributed: process groups (local, MPI, NCCL) and DataParallel (docs/distributed.md)
#include "distributed/data_parallel.h"
#include "distributed/mpi.h"
#include "distributed/nccl.h"
#include "distributed/process_group.h"

// compression: pruning masks and compaction, int8 quantization, 8-bit AdamW
#include "nn/optim/adamw8bit.h"
#include "prune/compact.h"
#include "prune/prune.h"
#include "quant/convert.h"
#include "quant/gemm_int8.h"
#include "quant/modules.h"

// cuda: device queries, in every build (no CUDA headers; 0 devices without CUDA)
#include "cuda/cuda_api.h"
