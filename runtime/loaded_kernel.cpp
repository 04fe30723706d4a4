#include "runtime/loaded_kernel.h"

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/runtime_counters.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

// Without opting in, a kernel may use this much dynamic shared memory.
constexpr int kDefaultDynamicSmemLimit = 48 * 1024;

std::string describe(const LaunchGeometry &g) {
  return llvm::formatv("grid=({0},{1},{2}) block=({3},{4},{5}) dynamic_smem={6}B", g.grid.x,
                       g.grid.y, g.grid.z, g.block.x, g.block.y, g.block.z,
                       g.dynamic_smem_bytes)
      .str();
}

// Errors are ignored: at process exit the driver may already be shut down
// (CUDA_ERROR_DEINITIALIZED) or the context destroyed by its owner, and a
// destructor has no one to report to. The driver validates the handle.
void unload(CUmodule module) {
  if (!module) return;
  if (auto driver = cuda_driver())
    driver->cuModuleUnload(module);
  else
    llvm::consumeError(driver.takeError());
}

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

}  // namespace

LoadedKernel::LoadedKernel(LoadedKernel &&other) noexcept { *this = std::move(other); }

LoadedKernel &LoadedKernel::operator=(LoadedKernel &&other) noexcept {
  if (this == &other) return *this;
  unload(module_);
  module_ = std::exchange(other.module_, nullptr);
  function_ = std::exchange(other.function_, nullptr);
  context_ = std::exchange(other.context_, nullptr);
  entry_ = std::move(other.entry_);
  dynamic_smem_bytes_ = std::exchange(other.dynamic_smem_bytes_, 0);
  sm_count_ = std::exchange(other.sm_count_, 0);
  attributes_ = std::exchange(other.attributes_, {});
  return *this;
}

LoadedKernel::~LoadedKernel() { unload(module_); }

llvm::Expected<LoadedKernel> LoadedKernel::load(llvm::ArrayRef<char> cubin,
                                                const std::string &entry,
                                                int dynamic_smem_bytes) {
  PhaseTimer loading(runtime_counters().module_load_ns);
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const CudaDriver &cu = *driver;
  auto context = current_or_primary_context();
  if (!context) return context.takeError();
  if (cubin.empty()) return error("cannot load kernel " + entry + ": the cubin is empty");

  // The driver reads the ELF image in place and expects its natural
  // alignment; bytes from a database row or a file need not have it.
  std::vector<uint64_t> aligned;
  const void *image = cubin.data();
  if (reinterpret_cast<uintptr_t>(image) % alignof(uint64_t) != 0) {
    aligned.resize((cubin.size() + 7) / 8);
    std::memcpy(aligned.data(), cubin.data(), cubin.size());
    image = aligned.data();
  }

  LoadedKernel kernel;
  kernel.context_ = context->context;
  kernel.entry_ = entry;
  kernel.dynamic_smem_bytes_ = dynamic_smem_bytes;
  if (llvm::Error e = cuda_check(cu.cuModuleLoadData(&kernel.module_, image),
                                 ("cuModuleLoadData of kernel " + entry).c_str()))
    return e;
  runtime_counters().module_loads.fetch_add(1, std::memory_order_relaxed);
  if (llvm::Error e =
          cuda_check(cu.cuModuleGetFunction(&kernel.function_, kernel.module_, entry.c_str()),
                     ("cuModuleGetFunction(\"" + entry + "\")").c_str()))
    return e;

  struct Attribute {
    CUfunction_attribute attribute;
    int *out;
  };
  KernelAttributes &a = kernel.attributes_;
  kernel.device_ = context->device;
  if (llvm::Error e = cuda_check(cu.cuDeviceGetAttribute(&kernel.sm_count_,
                                                         CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                                         context->device),
                                 "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)"))
    return e;
  for (Attribute attr : {Attribute{CU_FUNC_ATTRIBUTE_NUM_REGS, &a.registers},
                         Attribute{CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &a.static_smem_bytes},
                         Attribute{CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &a.local_bytes},
                         Attribute{CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                   &a.max_threads_per_block},
                         Attribute{CU_FUNC_ATTRIBUTE_PTX_VERSION, &a.ptx_version},
                         Attribute{CU_FUNC_ATTRIBUTE_BINARY_VERSION, &a.binary_version}}) {
    if (llvm::Error e = cuda_check(cu.cuFuncGetAttribute(attr.out, attr.attribute,
                                                         kernel.function_),
                                   ("cuFuncGetAttribute of kernel " + entry).c_str()))
      return e;
  }

  if (dynamic_smem_bytes > 0) {
    CUresult r = cu.cuFuncSetAttribute(
        kernel.function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_smem_bytes);
    if (r != CUDA_SUCCESS) {
      int optin = 0;
      cu.cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                              context->device);
      return llvm::joinErrors(
          error(llvm::formatv("kernel {0} needs {1} B of dynamic shared memory (plus {2} B "
                              "static); device {3} allows at most {4} B per block",
                              entry, dynamic_smem_bytes, a.static_smem_bytes, context->device,
                              optin)
                    .str()),
          cuda_check(r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)"));
    }
  }
  // A hint, not a requirement: it lets the driver give shared memory the
  // whole unified L1/shared array so a second CTA can be resident. The small
  // kernels that run beside a forward under programmatic dependent launch
  // (combine, append: no dynamic shared memory) ask for the same split, so
  // their CTAs and the forward's can share an SM without it draining to
  // change the split. Failure only costs occupancy, so it is not an error.
  if (dynamic_smem_bytes > kDefaultDynamicSmemLimit || dynamic_smem_bytes == 0)
    cu.cuFuncSetAttribute(kernel.function_, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                          CU_SHAREDMEM_CARVEOUT_MAX_SHARED);
  return kernel;
}

llvm::Expected<int> LoadedKernel::occupancy(int threads) const {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  int blocks = 0;
  if (llvm::Error e = cuda_check(driver->cuOccupancyMaxActiveBlocksPerMultiprocessor(
                                     &blocks, function_, threads, dynamic_smem_bytes_),
                                 ("cuOccupancyMaxActiveBlocksPerMultiprocessor of " + entry_)
                                     .c_str()))
    return e;
  return blocks;
}

llvm::Error LoadedKernel::launch(const LaunchGeometry &geometry, CUstream stream, void **params,
                                 bool dependent) const {
  if (!function_) return error("launch of an unloaded kernel");
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();

  // The driver reports all of these as CUDA_ERROR_INVALID_VALUE; name them.
  const Dim3 &g = geometry.grid, &b = geometry.block;
  const uint64_t threads = uint64_t(b.x) * b.y * b.z;
  const int smem_limit = dynamic_smem_bytes_ > 0 ? dynamic_smem_bytes_ : kDefaultDynamicSmemLimit;
  const char *problem = nullptr;
  if (g.x == 0 || g.y == 0 || g.z == 0 || threads == 0)
    problem = "an empty grid or block";
  else if (g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
    problem = "a grid beyond the hardware limits (x < 2^31, y and z <= 65535)";
  else if (attributes_.max_threads_per_block > 0 &&
           threads > uint64_t(attributes_.max_threads_per_block))
    problem = "more threads per block than the compiled kernel allows";
  else if (geometry.dynamic_smem_bytes > smem_limit)
    problem = "more dynamic shared memory than the limit set when the kernel was loaded";
  if (problem)
    return error(llvm::formatv("cannot launch {0} with {1}: {2} (max threads {3}, smem limit "
                               "{4} B)",
                               entry_, describe(geometry), problem,
                               attributes_.max_threads_per_block, smem_limit)
                     .str());

  CUresult r;
  if (dependent) {
    // Programmatic dependent launch: this grid may be scheduled once every
    // CTA of the one before on the stream has run griddepcontrol.
    // launch_dependents; it waits for that grid's completion and memory in
    // griddepcontrol.wait, so its launch overlaps the other's tail.
    CUlaunchAttribute attribute{};
    attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = g.x;
    config.gridDimY = g.y;
    config.gridDimZ = g.z;
    config.blockDimX = b.x;
    config.blockDimY = b.y;
    config.blockDimZ = b.z;
    config.sharedMemBytes = unsigned(geometry.dynamic_smem_bytes);
    config.hStream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    r = driver->cuLaunchKernelEx(&config, function_, params, nullptr);
  } else {
    r = driver->cuLaunchKernel(function_, g.x, g.y, g.z, b.x, b.y, b.z,
                               unsigned(geometry.dynamic_smem_bytes), stream, params, nullptr);
  }
  if (r != CUDA_SUCCESS)
    return cuda_check(r, ("cuLaunchKernel(" + entry_ + ", " + describe(geometry) + ")").c_str());
  runtime_counters().launches.fetch_add(1, std::memory_order_relaxed);
  return llvm::Error::success();
}

}  // namespace flashjit
