// The runtime against a real GPU: device query, memory, NVRTC -> module ->
// launch, the kernel cache under concurrency, and the C API's errors. Skips
// cleanly (with the reason) where there is no driver or no device.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "flashjit/flashjit.h"
#include "flashjit/forward.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/device_buffer.h"
#include "runtime/kernel_cache.h"
#include "runtime/loaded_kernel.h"
#include "runtime/nvrtc_compiler.h"

namespace flashjit {
namespace {

class RuntimeGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto driver = cuda_driver();
    if (!driver) GTEST_SKIP() << llvm::toString(driver.takeError());
    auto count = device_count();
    if (!count) GTEST_SKIP() << llvm::toString(count.takeError());
    if (*count == 0) GTEST_SKIP() << "no CUDA device visible";
    auto context = current_or_primary_context();
    ASSERT_TRUE(bool(context)) << llvm::toString(context.takeError());
    context_ = *context;
    auto info = query_device(int(context_.device));
    ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
    device_ = *info;
  }

  ContextInfo context_;
  DeviceInfo device_;
};

GeneratedSource doubling_source() {
  static const TemplateFile kHeaders[] = {
      {"tiny/scale.cuh", "#pragma once\nconstexpr int kScale = 2;\n"}};
  GeneratedSource s;
  s.program_name = "doubling.cu";
  s.entry = "doubling";
  s.source = "#include \"tiny/scale.cuh\"\n"
             "extern \"C\" __global__ void doubling(int *out, int n) {\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < n) out[i] = i * kScale;\n"
             "}\n";
  s.options = {"-std=c++17"};
  s.headers = kHeaders;
  return s;
}

llvm::Expected<std::unique_ptr<LoadedKernel>> build_doubling(const DeviceInfo &device) {
  GeneratedSource source = doubling_source();
  auto cubin = compile_to_cubin(source, device.target());
  if (!cubin) return cubin.takeError();
  auto kernel = LoadedKernel::load(cubin->bytes, source.entry, 0);
  if (!kernel) return kernel.takeError();
  return std::make_unique<LoadedKernel>(std::move(*kernel));
}

TEST_F(RuntimeGpuTest, QueryDeviceIsPlausible) {
  EXPECT_FALSE(device_.name.empty());
  EXPECT_GE(device_.cc_major, 7);
  EXPECT_GT(device_.sm_count, 0);
  EXPECT_GE(device_.max_smem_per_block_optin, 48 * 1024);
  EXPECT_GE(device_.max_smem_per_sm, device_.max_smem_per_block_optin);
  EXPECT_GT(device_.l2_bytes, 1 << 20);
  EXPECT_GE(device_.driver_version, 11000);
  EXPECT_GT(device_.total_memory, size_t(1) << 30);
  auto again = current_or_primary_context();
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(again->context, context_.context);

  auto missing = query_device(1000);
  ASSERT_FALSE(bool(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find("no CUDA device 1000"), std::string::npos);
}

TEST_F(RuntimeGpuTest, DeviceBufferRoundTrip) {
  std::vector<int> host(1000);
  for (int i = 0; i < 1000; ++i) host[i] = i * 7 - 3;
  auto buffer = DeviceBuffer::allocate(host.size() * sizeof(int));
  ASSERT_TRUE(bool(buffer)) << llvm::toString(buffer.takeError());
  ASSERT_FALSE(bool(buffer->upload(host.data(), host.size() * sizeof(int))));
  std::vector<int> back(1000, 0);
  ASSERT_FALSE(bool(buffer->download(back.data(), back.size() * sizeof(int))));
  EXPECT_EQ(back, host);

  ASSERT_FALSE(bool(buffer->fill_bytes(0xAB)));
  std::vector<unsigned char> bytes(16);
  ASSERT_FALSE(bool(buffer->download(bytes.data(), bytes.size(), 100)));
  for (unsigned char b : bytes) EXPECT_EQ(b, 0xAB);

  llvm::Error overflow = buffer->upload(host.data(), 8, buffer->size() - 4);
  ASSERT_TRUE(bool(overflow));
  EXPECT_NE(llvm::toString(std::move(overflow)).find("exceeds"), std::string::npos);

  DeviceBuffer moved = std::move(*buffer);
  EXPECT_EQ(buffer->address(), 0u);
  EXPECT_NE(moved.address(), 0u);
}

TEST_F(RuntimeGpuTest, CompileLoadLaunchAndTime) {
  const RuntimeStats before = runtime_stats();
  auto kernel = build_doubling(device_);
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  const LoadedKernel &k = **kernel;
  EXPECT_GT(k.attributes().registers, 0);
  EXPECT_GE(k.attributes().max_threads_per_block, 256);
  EXPECT_EQ(k.attributes().binary_version, device_.cc_major * 10 + device_.cc_minor);
  auto blocks = k.occupancy(128);
  ASSERT_TRUE(bool(blocks)) << llvm::toString(blocks.takeError());
  EXPECT_GT(*blocks, 0);

  constexpr int n = 1000;
  auto out = DeviceBuffer::allocate(n * sizeof(int));
  ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
  ASSERT_FALSE(bool(out->fill_bytes(0xFF)));
  CUdeviceptr ptr = out->address();
  int count = n;
  void *params[] = {&ptr, &count};
  LaunchGeometry geometry;
  geometry.grid.x = (n + 127) / 128;
  geometry.block.x = 128;
  ASSERT_FALSE(bool(k.launch(geometry, nullptr, params)));
  auto driver = cuda_driver();
  ASSERT_TRUE(bool(driver));
  ASSERT_FALSE(bool(cuda_check(driver->cuCtxSynchronize(), "cuCtxSynchronize")));
  std::vector<int> host(n);
  ASSERT_FALSE(bool(out->download(host.data(), n * sizeof(int))));
  for (int i = 0; i < n; ++i) ASSERT_EQ(host[i], 2 * i) << "at " << i;

  const RuntimeStats after = runtime_stats();
  EXPECT_EQ(after.compiles, before.compiles + 1);
  EXPECT_EQ(after.module_loads, before.module_loads + 1);
  EXPECT_EQ(after.launches, before.launches + 1);

  auto timing = time_on_stream(nullptr, 2, 5, [&] { return k.launch(geometry, nullptr, params); });
  ASSERT_TRUE(bool(timing)) << llvm::toString(timing.takeError());
  EXPECT_GT(timing->median_ms, 0.0);
  EXPECT_LE(timing->min_ms, timing->median_ms);
  EXPECT_LE(timing->median_ms, timing->max_ms);
}

TEST_F(RuntimeGpuTest, BadLaunchNamesKernelAndGeometry) {
  auto kernel = build_doubling(device_);
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  LaunchGeometry geometry;
  geometry.block.x = 2048;
  llvm::Error e = (*kernel)->launch(geometry, nullptr, nullptr);
  ASSERT_TRUE(bool(e));
  std::string message = llvm::toString(std::move(e));
  EXPECT_NE(message.find("doubling"), std::string::npos) << message;
  EXPECT_NE(message.find("block=(2048,1,1)"), std::string::npos) << message;
}

TEST_F(RuntimeGpuTest, KernelCacheBuildsOnceUnderSixteenThreads) {
  KernelCache cache;
  std::atomic<int> builds{0};
  const DeviceInfo device = device_;
  KernelCache::Builder build = [&builds, device] {
    builds.fetch_add(1);
    return build_doubling(device);
  };
  constexpr int kThreads = 16;
  std::vector<const LoadedKernel *> got(kThreads, nullptr);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      // A new thread has no current context; this makes the primary current.
      auto context = current_or_primary_context();
      if (!context) {
        errors[t] = llvm::toString(context.takeError());
        return;
      }
      auto kernel = cache.get_or_build("doubling", context->context, build);
      if (kernel)
        got[t] = &*kernel;
      else
        errors[t] = llvm::toString(kernel.takeError());
    });
  for (std::thread &t : threads) t.join();
  EXPECT_EQ(builds.load(), 1);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    EXPECT_EQ(got[t], got[0]) << "thread " << t;
  }
}

TEST_F(RuntimeGpuTest, HostPointersAreRejected) {
  Problem p;
  p.seqlen_q = p.seqlen_k = 17;
  p.head_dim_qk = p.head_dim_v = 64;
  alignas(16) static unsigned short host[17 * 64];
  Status status = forward(p, ForwardArgs::packed(p, host, host, host, host, nullptr));
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("argument q"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("not memory the GPU can access"), std::string::npos)
      << status.message();
}

TEST_F(RuntimeGpuTest, CApiReportsErrors) {
  flashjit_forward_args args;
  std::memset(&args, 0, sizeof(args));
  EXPECT_NE(flashjit_forward(nullptr, &args, nullptr, nullptr), 0);
  EXPECT_NE(std::string(flashjit_last_error()).find("problem is NULL"), std::string::npos);
}

}  // namespace
}  // namespace flashjit
