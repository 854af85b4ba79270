// SPDX-License-Identifier: MIT
// The umbrella header: #include <snug/snug.h> gives the public API.
//
// Every header is reached as <snug/...> (NOTE [ Include paths ] in
// cmake/include_tree.cmake): <prefix>/include is the one folder a consumer
// needs on its include path. Headers for one part only (e.g.
// <snug/memory/allocator.h>) may be included directly. Internal headers
// (core/cpu/*.h, core/backend.h, memory/caching_*.h, cuda/check.h) are not
// part of this list.
#pragma once

#include <snug/version.h>

// core: tensors and what they are made of
#include <snug/base/device.h>
#include <snug/base/error.h>
#include <snug/core/cpu_isa.h>
#include <snug/core/dtype.h>
#include <snug/core/generator.h>
#include <snug/core/shape.h>
#include <snug/core/tensor.h>

// memory: the caching allocator's public face
#include <snug/memory/allocator.h>
#include <snug/memory/history.h>
#include <snug/memory/settings.h>
#include <snug/memory/stats.h>
#include <snug/memory/stream.h>

// autograd: differentiable ops, grad mode, backward, gradcheck
#include <snug/autograd/autocast.h>
#include <snug/autograd/checkpoint.h>
#include <snug/autograd/engine.h>
#include <snug/autograd/grad_mode.h>
#include <snug/autograd/gradcheck.h>
#include <snug/autograd/node.h>
#include <snug/autograd/ops.h>

// serialization, nn (modules, layers, optimizers, models) and data
#include <snug/core/safetensors.h>
#include <snug/data/bpe.h>
#include <snug/data/chunked.h>
#include <snug/data/cifar.h>
#include <snug/data/collate.h>
#include <snug/data/dataloader.h>
#include <snug/data/dataset.h>
#include <snug/data/mnist.h>
#include <snug/data/sampler.h>
#include <snug/data/text.h>
#include <snug/data/token_file.h>
#include <snug/nn/accumulate.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/attention.h>
#include <snug/nn/batch_norm.h>
#include <snug/nn/checkpoint_sequential.h>
#include <snug/nn/conv.h>
#include <snug/nn/functional.h>
#include <snug/nn/fuse.h>
#include <snug/nn/init.h>
#include <snug/nn/layers.h>
#include <snug/nn/models/bert.h>
#include <snug/nn/models/cnn.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/models/hf.h>
#include <snug/nn/models/resnet.h>
#include <snug/nn/module.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/nn/planner.h>
#include <snug/nn/pool.h>
#include <snug/nn/training_state.h>

// parallel: layer placement across devices and pipelined micro-batches
#include <snug/parallel/layer_stack.h>
#include <snug/parallel/pipeline.h>
#include <snug/parallel/placement.h>

// distributed: process groups (local, MPI, NCCL) and DataParallel (docs/distributed.md)
#include <snug/distributed/data_parallel.h>
#include <snug/distributed/mpi.h>
#include <snug/distributed/nccl.h>
#include <snug/distributed/process_group.h>

// compression: pruning masks and compaction, int8 quantization, 8-bit AdamW
#include <snug/core/raw_int8.h>
#include <snug/nn/optim/adamw8bit.h>
#include <snug/prune/compact.h>
#include <snug/prune/prune.h>
#include <snug/quant/convert.h>
#include <snug/quant/modules.h>

// cuda: device queries, in every build (no CUDA headers; 0 devices without CUDA)
#include <snug/cuda/cuda_api.h>
