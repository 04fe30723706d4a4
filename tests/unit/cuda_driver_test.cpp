// libcuda loading. The CPU build machine has no driver: the errors must say
// what is missing and what to do instead.
#include "runtime/cuda_driver.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "runtime/device.h"

namespace flashjit {
namespace {

void expect_contains(const std::string &message, const char *needle) {
  EXPECT_NE(message.find(needle), std::string::npos) << "'" << needle << "' not in: " << message;
}

TEST(CudaDriver, MissingLibraryGivesOneClearError) {
  const char *names[] = {"libflashjit_no_such_cuda.so.1"};
  auto driver = detail::load_cuda_driver(names);
  ASSERT_FALSE(bool(driver));
  std::string message = llvm::toString(driver.takeError());
  expect_contains(message, "cannot load the CUDA driver (libflashjit_no_such_cuda.so.1): ");
  expect_contains(message, "flashjit needs an NVIDIA driver to run kernels");
  expect_contains(message, "`flashjit compile --arch sm_90a`");
}

TEST(CudaDriver, ProcessDriverOnThisMachine) {
  auto driver = cuda_driver();
  if (driver) GTEST_SKIP() << "a CUDA driver is present (" << driver->library << ")";
  std::string message = llvm::toString(driver.takeError());
  if (message.find("cannot load the CUDA driver") != std::string::npos) {
    expect_contains(message, "cannot load the CUDA driver (libcuda.so.1): ");
    expect_contains(message, "flashjit compile --arch sm_90a");
  } else {
    // A driver without a usable GPU: the cuInit failure, explained.
    expect_contains(message, "cuInit failed");
  }
  // Every runtime entry point reports the same error instead of crashing.
  auto count = device_count();
  ASSERT_FALSE(bool(count));
  EXPECT_EQ(llvm::toString(count.takeError()), message);
  auto context = current_or_primary_context();
  ASSERT_FALSE(bool(context));
  llvm::consumeError(context.takeError());
}

// In a child process: the stub's soname is libcuda.so.1, so once loaded it
// would answer this process's later dlopen("libcuda.so.1") in place of the
// real driver.
TEST(CudaDriverDeathTest, StubLibraryIsRecognised) {
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) != 0) GTEST_SKIP() << "no toolkit stub at " << stub;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const char *names[] = {stub};
        auto driver = detail::load_cuda_driver(names);
        if (driver) std::exit(0);
        std::fprintf(stderr, "%s\n", llvm::toString(driver.takeError()).c_str());
        std::exit(3);
      },
      ::testing::ExitedWithCode(3), "cuInit failed(.|\n)*stub");
}

TEST(CudaDriver, CudaCheckNamesTheCall) {
  EXPECT_FALSE(bool(cuda_check(CUDA_SUCCESS, "cuInit")));
  llvm::Error e = cuda_check(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData");
  ASSERT_TRUE(bool(e));
  std::string message = llvm::toString(std::move(e));
  EXPECT_EQ(message.rfind("cuModuleLoadData failed: ", 0), 0u) << message;
}

}  // namespace
}  // namespace flashjit
