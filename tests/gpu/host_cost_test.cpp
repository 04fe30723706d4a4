// The C++ API's host cost per call on a warm class with the real driver
// (the bar: <= 5 us from flashjit::forward's entry to cuLaunchKernel's
// return; 3.8-3.9 us on the H200, 2026-12-01). tests/host/host_overhead.cpp
// measures flashjit's own share against a stub driver in CI; this adds the
// real driver, and replays the driver work of the same call (the launch of
// the same kernel with the same arguments, the pointer and context queries,
// the workspace), so that flashjit's share is asserted apart from the
// driver's (whose cost moves with the machine: a bare launch took 3 us,
// later 3.9-4.3 us on the same kind of host). Calls are timed in groups small enough that the
// launch queue never fills (a full queue would make the host wait on the GPU), with a
// synchronisation between groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "flashjit/forward.h"
#include "generator/forward_params.h"
#include "gpu_environment.h"
#include "runtime/launch_forward.h"
#include "runtime/tensor_checks.h"
#include "runtime/tensor_maps.h"
#include "runtime/workspace_pool.h"

namespace flashjit {
namespace {

constexpr int kGroups = 60;
constexpr int kCallsPerGroup = 32;

// The median over kGroups groups of kCallsPerGroup calls of `call`, in us per
// call, synchronising the context before each group.
template <class Call>
double median_group_us(const CudaDriver &driver, Call &&call) {
  std::vector<double> per_call;
  for (int g = 0; g < kGroups; ++g) {
    if (driver.cuCtxSynchronize() != CUDA_SUCCESS) return -1;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCallsPerGroup; ++i) call();
    const auto end = std::chrono::steady_clock::now();
    per_call.push_back(std::chrono::duration<double, std::micro>(end - start).count() /
                       kCallsPerGroup);
  }
  if (driver.cuCtxSynchronize() != CUDA_SUCCESS) return -1;
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

// Sets `us` to the median host time per warm call of `p`.
void median_host_us(const Problem &p, double &us) {
  auto dq = DeviceBuffer::allocate(q_elements(p) * 2);
  auto dk = DeviceBuffer::allocate(k_elements(p) * 2);
  auto dv = DeviceBuffer::allocate(v_elements(p) * 2);
  auto dout = DeviceBuffer::allocate(o_elements(p) * 2);
  auto dlse = DeviceBuffer::allocate(lse_elements(p) * 4);
  FLASHJIT_ASSERT_OK(dq.takeError());
  FLASHJIT_ASSERT_OK(dk.takeError());
  FLASHJIT_ASSERT_OK(dv.takeError());
  FLASHJIT_ASSERT_OK(dout.takeError());
  FLASHJIT_ASSERT_OK(dlse.takeError());
  FLASHJIT_ASSERT_OK(dq->fill_bytes(0));
  FLASHJIT_ASSERT_OK(dk->fill_bytes(0));
  FLASHJIT_ASSERT_OK(dv->fill_bytes(0));
  const ForwardArgs args = ForwardArgs::packed(p, dq->data(), dk->data(), dv->data(),
                                               dout->data(), static_cast<float *>(dlse->data()));
  auto driver = cuda_driver();
  FLASHJIT_ASSERT_OK(driver.takeError());
  for (int i = 0; i < 20; ++i) {  // the first call compiles and loads
    Status s = forward(p, args);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  us = median_group_us(*driver, [&] { (void)forward(p, args); });
  ASSERT_GT(us, 0.0);
}

// The driver's work a warm call adds to its launch, for the breakdown.
enum DriverWork : unsigned {
  kLaunchOnly = 0,
  kPointerChecks = 1,  // the four cuPointerGetAttribute of the argument checks
  kTensorMaps = 2,     // the three tensor maps (a warm call's come from its recent encodes)
  kContextQuery = 4,   // cuCtxGetCurrent
  kWorkspace = 8,      // the split-KV workspace's pool allocation and free
};

// Sets `us` to the median time of the driver's bare launch of `p`'s warm
// kernels (cuLaunchKernelEx with the same parameters, tensor maps and
// attributes, encoded once; a split-KV problem's forward and combine):
// what a call costs without flashjit; with `work`, that driver work too
// before each launch (kWorkspace: a split problem's partials, allocated
// and freed as a call does).
void median_bare_launch_us(const Problem &p, double &us, unsigned work = kLaunchOnly) {
  const size_t inputs = std::max({q_elements(p), k_elements(p), v_elements(p)}) * 2;
  auto buffer = DeviceBuffer::allocate(inputs + o_elements(p) * 2);
  auto lse = DeviceBuffer::allocate(lse_elements(p) * 4);
  FLASHJIT_ASSERT_OK(buffer.takeError());
  FLASHJIT_ASSERT_OK(lse.takeError());
  FLASHJIT_ASSERT_OK(buffer->fill_bytes(0));
  char *base = static_cast<char *>(buffer->data());
  const ForwardArgs args =
      ForwardArgs::packed(p, base, base, base, base + inputs, static_cast<float *>(lse->data()));
  auto driver = cuda_driver();
  FLASHJIT_ASSERT_OK(driver.takeError());
  auto spec = resolve_forward_spec(p, {});
  FLASHJIT_ASSERT_OK(spec.takeError());
  ASSERT_EQ(spec->config.path, KernelPath::sm90);
  auto kernels = get_forward_kernels(*spec);
  FLASHJIT_ASSERT_OK(kernels.takeError());
  const LoadedKernel &kernel = *kernels->main;
  const int splits = forward_num_splits(*spec, p, 0, kernel.sm_count());
  ASSERT_TRUE(splits == 1 || kernels->combine);
  FwdParams params = make_forward_params(p, args);
  auto maps = make_forward_tensor_maps(*spec, p, args);
  FLASHJIT_ASSERT_OK(maps.takeError());
  void *kernel_args[] = {&params, &maps->q, &maps->k, &maps->v};
  void *combine_args[] = {&params};
  const LaunchGeometry geometry = forward_launch_geometry(*spec, p, kernel.sm_count(), splits);
  const LaunchGeometry combine_geometry = forward_combine_geometry(p);
  const uint64_t workspace_bytes = forward_split_workspace_bytes(p, splits);
  const uint64_t rows = static_cast<uint64_t>(forward_lse_rows(p, 0));
  // The call's launches, with its workspace when split (allocated with
  // `work`, else once here).
  CUdeviceptr fixed = 0;
  auto launch = [&](CUdeviceptr workspace) {
    if (splits > 1) {
      params.num_splits = splits;
      params.o_partial = reinterpret_cast<float *>(workspace);
      params.lse_partial = params.o_partial + uint64_t(splits) * rows * p.head_dim_v;
    }
    llvm::consumeError(kernel.launch(geometry, nullptr, kernel_args, /*dependent=*/true));
    if (splits > 1)
      llvm::consumeError(
          kernels->combine->launch(combine_geometry, nullptr, combine_args, /*dependent=*/true));
  };
  if (splits > 1) {
    auto allocated = allocate_workspace(kernel.device(), workspace_bytes, nullptr);
    FLASHJIT_ASSERT_OK(allocated.takeError());
    fixed = *allocated;
  }
  for (int i = 0; i < 20; ++i) launch(fixed);
  CUcontext context = nullptr;
  us = median_group_us(*driver, [&] {
    if (work & kPointerChecks)
      for (const void *ptr : {args.q, args.k, args.v, static_cast<const void *>(args.o)})
        llvm::consumeError(check_device_pointer(*driver, "x", ptr));
    if (work & kContextQuery) (void)driver->cuCtxGetCurrent(&context);
    if (work & kTensorMaps) {
      auto encoded = make_forward_tensor_maps(*spec, p, args);
      if (encoded)
        *maps = *encoded;
      else
        llvm::consumeError(encoded.takeError());
    }
    if (splits > 1 && (work & kWorkspace)) {
      auto allocated = allocate_workspace(kernel.device(), workspace_bytes, nullptr);
      if (!allocated) {
        llvm::consumeError(allocated.takeError());
        return;
      }
      launch(*allocated);
      llvm::consumeError(free_workspace(*allocated, nullptr));
    } else {
      launch(fixed);
    }
  });
  if (fixed) FLASHJIT_ASSERT_OK(free_workspace(fixed, nullptr));
  ASSERT_GT(us, 0.0);
}

// flashjit's own share of a warm call: at most this much over the driver
// work the call makes, timed interleaved as the call makes it: its launches,
// the argument checks' pointer queries, the context query and, split-KV,
// the workspace's pool allocation and free (against the stub driver in CI
// the own share is 0.6-1.1 us: tests/host/host_overhead.cpp; on the H200's
// host 0.6-1.2 us alone).
constexpr double kOwnShareUs = 2.0;

TEST(HostCost, WarmForwardCallCostsItsDriverWorkPlusAtMostTwoMicroseconds) {
  FLASHJIT_REQUIRE_SM90();
  const Problem small =
      testing::make_problem(DType::bf16, 1, 16, 16, 128, 128, 128, 128, MaskKind::causal);
  double bare = -1;
  median_bare_launch_us(small, bare);
  std::printf("the driver's bare launch of the b=1 s=128 kernel: %.2f us\n", bare);
  ::testing::Test::RecordProperty("bare launch", std::to_string(bare));
  struct Row {
    const char *name;
    Problem problem;
    bool split;  // the forward and the combine over a pool workspace
  };
  const Row rows[] = {
      {"b=1 s=128 h=16 d=128 causal", small, false},
      {"b=32 s=512 h=16 d=128 causal",
       testing::make_problem(DType::bf16, 32, 16, 16, 512, 512, 128, 128, MaskKind::causal), false},
      {"decode b=8 h=32/8 kv=8192 (split-KV + combine)",
       testing::make_problem(DType::bf16, 8, 32, 8, 1, 8192, 128, 128, MaskKind::none), true},
  };
  for (const Row &row : rows) {
    // The driver work: the row's own kernels, launched as the call does.
    double driver_us = -1;
    median_bare_launch_us(row.problem, driver_us, kPointerChecks | kContextQuery | kWorkspace);
    double us = -1;
    median_host_us(row.problem, us);
    std::printf(
        "host cost per warm call, %s: %.2f us (forward entry to launch return), the "
        "driver's work %.2f us, flashjit's own %.2f us\n",
        row.name, us, driver_us, us - driver_us);
    ::testing::Test::RecordProperty(row.name, std::to_string(us));
    EXPECT_GT(us, 0.0) << row.name;
    EXPECT_GT(driver_us, 0.0) << row.name;
    EXPECT_LE(us, driver_us + kOwnShareUs) << row.name << ": the driver's work " << driver_us
                                           << " us + flashjit's own <= " << kOwnShareUs << " us";
    const int launches = row.split ? 2 : 1;
    if (us > 5.0 * launches)  // the 5 us bar, where the driver allows it
      std::printf("  over 5 us per launch: the driver's own launch takes %.2f us here\n", bare);
  }
}

// What the warm call's driver work costs, one kind at a time (reported: it
// says where the host time goes, not whether it is right).
TEST(HostCost, DriverCallsOfAWarmCall) {
  FLASHJIT_REQUIRE_GPU();
  const Problem p =
      testing::make_problem(DType::bf16, 1, 16, 16, 128, 128, 128, 128, MaskKind::causal);
  auto buffer = DeviceBuffer::allocate(q_elements(p) * 2);
  FLASHJIT_ASSERT_OK(buffer.takeError());
  auto driver = cuda_driver();
  FLASHJIT_ASSERT_OK(driver.takeError());
  auto spec = resolve_forward_spec(p, {});
  FLASHJIT_ASSERT_OK(spec.takeError());
  const ForwardArgs args = ForwardArgs::packed(p, buffer->data(), buffer->data(), buffer->data(),
                                               buffer->data(), nullptr);
  constexpr int kCalls = 2000;
  auto time_us = [&](auto &&fn) {
    for (int i = 0; i < 100; ++i) fn();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) fn();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
               .count() / kCalls;
  };
  const double pointer = time_us([&] {
    llvm::consumeError(check_device_pointer(*driver, "q", buffer->data()));
  });
  CUcontext context = nullptr;
  const double context_query = time_us([&] { (void)driver->cuCtxGetCurrent(&context); });
  const double maps = time_us([&] {
    auto m = make_forward_tensor_maps(*spec, p, args);
    if (!m) llvm::consumeError(m.takeError());
  });
  std::printf(
      "driver work per warm call: pointer check %.3f us, context query %.3f us, "
      "3 tensor maps (%s; recent encodes) %.3f us\n",
      pointer, context_query, spec->id().c_str(), maps);
  EXPECT_GT(pointer, 0.0);
  // The same work interleaved with launches, as a call does it: the
  // launch's cost moves with what the driver did just before.
  double launch = -1, with_pointers = -1, with_maps = -1, with_all = -1;
  median_bare_launch_us(p, launch);
  median_bare_launch_us(p, with_pointers, kPointerChecks);
  median_bare_launch_us(p, with_maps, kTensorMaps);
  median_bare_launch_us(p, with_all, kPointerChecks | kTensorMaps | kContextQuery);
  std::printf(
      "interleaved with launches, us per call: launch %.2f, + pointer checks %.2f, "
      "+ tensor maps %.2f, + all three kinds %.2f\n",
      launch, with_pointers, with_maps, with_all);
}

}  // namespace
}  // namespace flashjit
