#include "runtime/cuda_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <string>

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

// Two levels so that the argument is macro-expanded first: the symbol looked
// up is "cuMemAlloc_v2", the one cuda.h's prototype of cuMemAlloc declares.
#define FLASHJIT_STRINGIFY_EXPANDED(x) FLASHJIT_STRINGIFY(x)
#define FLASHJIT_STRINGIFY(x) #x

namespace flashjit {
namespace {

// The process driver's table once it is loaded, for cuda_check's error names.
// Never reset: libcuda is never dlclose'd, so the pointers stay valid through
// process teardown.
std::atomic<const CudaDriver *> g_error_names{nullptr};

std::string describe_result(const CudaDriver *names, CUresult result, const char *call) {
  const char *name = nullptr;
  const char *description = nullptr;
  if (names) {
    names->cuGetErrorName(result, &name);
    names->cuGetErrorString(result, &description);
  }
  return llvm::formatv("{0} failed: {1} ({2})", call, name ? name : "CUDA error",
                       description ? description : llvm::formatv("code {0}", int(result)).str())
      .str();
}

struct LoadedDriver {
  CudaDriver table;
  std::string error;  // empty when loaded; llvm::Error cannot be stored
};

const LoadedDriver &process_driver() {
  // A function-local static: C++ guarantees one initialisation even when
  // threads race here. Leaked on purpose: kernels and buffers owned by other
  // statics may still call the driver during teardown.
  static const LoadedDriver *loaded = [] {
    auto *out = new LoadedDriver;
    llvm::Expected<CudaDriver> driver = detail::load_cuda_driver(detail::cuda_driver_sonames());
    if (driver) {
      out->table = std::move(*driver);
      g_error_names.store(&out->table);
    } else
      out->error = llvm::toString(driver.takeError());
    return out;
  }();
  return *loaded;
}

}  // namespace

namespace detail {

llvm::ArrayRef<const char *> cuda_driver_sonames() {
  // libcuda.so is only a development symlink, absent on most driver-only
  // machines; libcuda.so.1 is what the driver installs.
  static const char *kNames[] = {"libcuda.so.1", "libcuda.so"};
  return kNames;
}

llvm::Expected<CudaDriver> load_cuda_driver(llvm::ArrayRef<const char *> libraries) {
  void *handle = nullptr;
  std::string first_error;
  const char *loaded_name = nullptr;
  for (const char *name : libraries) {
    // RTLD_LOCAL: the driver's symbols must not satisfy an application's own
    // references by accident; we only reach them through this table.
    handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      loaded_name = name;
      break;
    }
    if (first_error.empty()) {
      const char *err = dlerror();
      first_error = err ? err : "unknown dlopen error";
    }
  }
  if (!handle)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("cannot load the CUDA driver ({0}): {1}. flashjit needs an NVIDIA driver "
                      "to run kernels; on a machine without a GPU use `flashjit compile --arch "
                      "sm_90a`.",
                      libraries.empty() ? "no library named" : libraries.front(), first_error)
            .str());

  CudaDriver driver;
  driver.library = loaded_name;
  llvm::SmallVector<llvm::StringRef, 4> missing;
#define FLASHJIT_CUDA_FN(name)                                                        \
  {                                                                                   \
    const char *symbol = FLASHJIT_STRINGIFY_EXPANDED(name);                           \
    driver.name = reinterpret_cast<decltype(driver.name)>(dlsym(handle, symbol));     \
    if (!driver.name) missing.push_back(symbol);                                      \
  }
#include "runtime/cuda_driver_functions.def"
#undef FLASHJIT_CUDA_FN
  if (!missing.empty()) {
    // The handle stays open: an old driver is still a loaded driver, and
    // closing it could unload state another library in the process shares.
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("the CUDA driver {0} is too old: it lacks {1}. flashjit is built against "
                      "CUDA {2}.{3}; install an NVIDIA driver that supports it.",
                      loaded_name, llvm::join(missing, ", "), CUDA_VERSION / 1000,
                      (CUDA_VERSION % 1000) / 10)
            .str());
  }

  CUresult init = driver.cuInit(0);
  if (init != CUDA_SUCCESS) {
    // Typical: CUDA_ERROR_NO_DEVICE (driver installed, no GPU visible) or
    // CUDA_ERROR_STUB_LIBRARY (the toolkit's stub libcuda found first).
    std::string reason = describe_result(&driver, init, "cuInit");
    const char *hint =
        init == CUDA_ERROR_STUB_LIBRARY
            ? "the toolkit's stub libcuda was loaded instead of the driver's; remove "
              "its directory (lib64/stubs) from LD_LIBRARY_PATH"
            : "check `nvidia-smi` and CUDA_VISIBLE_DEVICES";
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("the CUDA driver ({0}) loaded but cannot be initialised: {1}; {2}. On a "
                      "machine without a GPU use `flashjit compile --arch sm_90a`.",
                      loaded_name, reason, hint)
            .str());
  }
  return driver;
}

}  // namespace detail

llvm::Expected<const CudaDriver &> cuda_driver() {
  const LoadedDriver &loaded = process_driver();
  if (!loaded.error.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), loaded.error);
  return loaded.table;
}

llvm::Error cuda_check(CUresult result, const char *call) {
  if (result == CUDA_SUCCESS) return llvm::Error::success();
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 describe_result(g_error_names.load(), result, call));
}

}  // namespace flashjit
