// SPDX-License-Identifier: MIT
// Tutorial chapter 1 (docs/tutorial/01-tensors.md): tensors, views, dtypes
// and devices. Every claim the chapter makes is checked here; the program
// exits 1 if one is false, so ctest (tutorial_01_tensors) catches a change.
#include <snug/snug.h>

#include <iostream>

using namespace snug;

static int failures = 0;
static void expect(bool ok, const char* what) {
  std::cout << (ok ? "ok:   " : "FAIL: ") << what << "\n";
  failures += ok ? 0 : 1;
}

int main() {
  // ---- creation: factories take a shape and options (dtype, device) ----
  Tensor z = zeros({2, 3});  // f32 on the CPU by default
  Tensor idx = arange(6);    // [0, 1, ..., 5], i64 by default
  Tensor v = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  manual_seed(0);  // random ops draw from a seeded generator
  Tensor r = randn({2, 3});
  std::cout << "v =\n" << v << "\n";
  expect(z.dtype() == kFloat32 && idx.dtype() == kInt64 && r.shape() == Shape{2, 3},
         "factories default to f32 (arange to i64)");

  // ---- views: reshape, transpose and slice share v's storage ----
  Tensor flat = v.reshape({6});   // contiguous, so a view
  Tensor vt = v.t();              // (3, 2): only the strides change
  Tensor col = v.slice(1, 1, 2);  // column 1, shape (2, 1)
  std::cout << "v.strides() = [" << v.stride(0) << ", " << v.stride(1) << "], v.t().strides() = [" << vt.stride(0)
            << ", " << vt.stride(1) << "]\n";
  expect(flat.storage() == v.storage() && vt.storage() == v.storage() && col.storage() == v.storage(),
         "reshape, t() and slice are views of the same storage");
  col.fill_(0);  // writing through a view writes v
  expect(v.to_vector<float>() == std::vector<float>{1, 0, 3, 4, 0, 6}, "filling a slice changes v");
  expect(!vt.is_contiguous() && vt.contiguous().storage() != v.storage(),
         "a transpose is not contiguous; contiguous() copies it");

  // ---- dtypes: to(dtype) converts (a copy); ops promote like NumPy ----
  Tensor third = full({1}, 1.0 / 3.0);  // f32
  Tensor b = third.to(kBFloat16);       // 8 bits of mantissa
  std::cout << "1/3 in f32 = " << third.item<float>() << ", in bf16 = " << b.item<float>() << "\n";
  expect(b.item<float>() != third.item<float>(), "bf16 rounds 1/3 (fewer mantissa bits)");
  expect(full({1}, 2.7).to(kInt64).item<int64_t>() == 2, "float -> int truncates toward 0");
  expect((idx + ones({6})).dtype() == kFloat32, "i64 + f32 promotes to f32");

  // ---- devices: cpu:N is a virtual device with its own pool and limit ----
  const Device dev("cpu:1");
  Tensor on1 = v.to(dev);  // a copy into cpu:1's pool
  std::cout << "on " << on1.device() << ": " << memory::allocated(dev) << " bytes allocated\n";
  expect(on1.device() == dev && memory::allocated(dev) > 0, "to(\"cpu:1\") allocates on cpu:1");
  try {
    Tensor mixed = v + on1;  // two devices in one op: refused
    expect(false, "an op across devices is an error");
  } catch (const DeviceError& e) {
    std::cout << "v + on1: " << e.what() << "\n";
    expect(true, "an op across devices is an error");
  }

  // ---- cuda: without a GPU (or without the CUDA plugin) a clear error ----
  if (cuda::is_available()) {
    Tensor g = v.to("cuda:0");
    expect(g.device().is_cuda() && g.to(kCPU).to_vector<float>() == v.to_vector<float>(),
           "a round trip through cuda:0 keeps the values");
  } else {
    try {
      Tensor g = zeros({2}, "cuda:0");
      expect(false, "cuda:0 without a GPU is an error");
    } catch (const DeviceError& e) {
      std::cout << "zeros({2}, \"cuda:0\"): " << e.what() << "\n";
      expect(true, "cuda:0 without a GPU is an error");
    }
  }

  std::cout << (failures == 0 ? "PASS" : "FAILED") << "\n";
  return failures == 0 ? 0 : 1;
}
