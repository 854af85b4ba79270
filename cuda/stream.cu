// SPDX-License-Identifier: MIT
// Streams and events on the current device (cuda/cuda_api.h): handles are the
// cudaStream_t / cudaEvent_t values as integers (NOTE in cuda/cuda_api.h).
#include <cuda_runtime.h>

#include <snug/cuda/check.h>
#include <snug/cuda/cuda_api.h>

namespace snug::cuda {

namespace {
cudaStream_t st(StreamHandle s) { return reinterpret_cast<cudaStream_t>(s); }
cudaEvent_t ev(EventHandle e) { return reinterpret_cast<cudaEvent_t>(e); }
}  // namespace

StreamHandle create_stream() {
  require_device("create_stream", 0);
  cudaStream_t s = nullptr;
  SNUG_CUDA_CHECK(cudaStreamCreate(&s));
  return reinterpret_cast<StreamHandle>(s);
}
StreamHandle create_copy_stream() {
  require_device("create_copy_stream", 0);
  cudaStream_t s = nullptr;
  SNUG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return reinterpret_cast<StreamHandle>(s);
}
void destroy_stream(StreamHandle s) {
  if (s) SNUG_CUDA_CHECK(cudaStreamDestroy(st(s)));
}
void synchronize_stream(StreamHandle s) { SNUG_CUDA_CHECK(cudaStreamSynchronize(st(s))); }
void stream_wait(StreamHandle waiter, StreamHandle s) {
  cudaEvent_t e = nullptr;
  SNUG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  SNUG_CUDA_CHECK(cudaEventRecord(e, st(s)));
  SNUG_CUDA_CHECK(cudaStreamWaitEvent(st(waiter), e, 0));
  SNUG_CUDA_CHECK(cudaEventDestroy(e));  // released once the wait is satisfied
}
EventHandle record_event(StreamHandle s) {
  require_device("record_event", 0);
  cudaEvent_t e = nullptr;
  SNUG_CUDA_CHECK(cudaEventCreate(&e));
  SNUG_CUDA_CHECK(cudaEventRecord(e, st(s)));
  return reinterpret_cast<EventHandle>(e);
}
bool event_done(EventHandle e) {
  const cudaError_t err = cudaEventQuery(ev(e));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  SNUG_CUDA_CHECK(err);
  return true;
}
void synchronize_event(EventHandle e) { SNUG_CUDA_CHECK(cudaEventSynchronize(ev(e))); }
double elapsed_ms(EventHandle start, EventHandle end) {
  float ms = 0;
  SNUG_CUDA_CHECK(cudaEventElapsedTime(&ms, ev(start), ev(end)));
  return ms;
}
void destroy_event(EventHandle e) {
  if (e) SNUG_CUDA_CHECK(cudaEventDestroy(ev(e)));
}

}  // namespace snug::cuda
