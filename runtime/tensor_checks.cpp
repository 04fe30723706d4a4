#include "runtime/tensor_checks.h"

#include <limits>

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace {

llvm::Error args_error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

// The kernels move rows with 16-byte vector loads and stores (8 elements of
// a 16-bit type): every row start must be 16-byte aligned, so base pointers
// must be and strides must be multiples of 8 elements.
constexpr int kVectorBytes = 16;
constexpr int kVectorElements = kVectorBytes / 2;

}  // namespace

llvm::Error check_device_pointer(const CudaDriver &cu, const char *name, const void *ptr) {
  CUdeviceptr device_ptr = 0;
  CUresult r = cu.cuPointerGetAttribute(&device_ptr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                        reinterpret_cast<CUdeviceptr>(ptr));
  if (r == CUDA_SUCCESS) return llvm::Error::success();
  return args_error(llvm::formatv(
      "argument {0} ({1}) is not memory the GPU can access ({2}): pass device memory "
      "(cudaMalloc, a CUDA tensor); host memory must be copied to the device first",
      name, ptr, llvm::toString(cuda_check(r, "cuPointerGetAttribute"))));
}

llvm::Error check_tensor_layout(const TensorCheck &t) {
  if (!t.data) return args_error(llvm::formatv("argument {0} is null", t.name));
  if (reinterpret_cast<uintptr_t>(t.data) % kVectorBytes)
    return args_error(llvm::formatv(
        "argument {0} ({1}) is not {2}-byte aligned: the kernel uses {2}-byte vector loads",
        t.name, t.data, kVectorBytes));
  struct Stride {
    const char *what;
    int64_t value;
    int64_t extent;
  };
  for (Stride s : {Stride{"batch", t.strides.batch, t.batch}, Stride{"seq", t.strides.seq, t.seqlen},
                   Stride{"head", t.strides.head, t.heads}}) {
    if (s.value < 0)
      return args_error(llvm::formatv(
          "argument {0}: {1} stride {2} is negative; strides must be >= 0 (the last "
          "dimension, head_dim, is assumed contiguous)",
          t.name, s.what, s.value));
    // A dimension of extent 1 is never stepped over, so its stride is free
    // (PyTorch gives such dimensions arbitrary strides).
    if (s.extent > 1 && s.value % kVectorElements)
      return args_error(llvm::formatv(
          "argument {0}: {1} stride {2} is not a multiple of {3} elements: the kernel uses "
          "{4}-byte vector loads, so every row must start {4}-byte aligned",
          t.name, s.what, s.value, kVectorElements, kVectorBytes));
  }
  // The last row's element offset (plus a row of up to 256 elements, 2 bytes
  // each) must fit the kernels' 64-bit byte offsets.
  int64_t last = 0;
  for (Stride s : {Stride{"batch", t.strides.batch, t.batch}, Stride{"seq", t.strides.seq, t.seqlen},
                   Stride{"head", t.strides.head, t.heads}}) {
    int64_t step = 0;
    if (s.extent > 1 && (__builtin_mul_overflow(s.value, s.extent - 1, &step) ||
                         __builtin_add_overflow(last, step, &last) ||
                         last > std::numeric_limits<int64_t>::max() / 2 - 256))
      return args_error(llvm::formatv(
          "argument {0}: strides (batch {1}, seq {2}, head {3}) over [batch={4}, seqlen={5}, "
          "heads={6}] reach past 2^62 elements: byte offsets would overflow 64 bits",
          t.name, t.strides.batch, t.strides.seq, t.strides.head, t.batch, t.seqlen, t.heads));
  }
  return llvm::Error::success();
}

llvm::Error check_tensors(llvm::ArrayRef<TensorCheck> tensors,
                          llvm::ArrayRef<PointerCheck> extra) {
  for (const TensorCheck &t : tensors)
    if (llvm::Error e = check_tensor_layout(t)) return e;
  for (const PointerCheck &x : extra) {
    if (!x.data) return args_error(llvm::formatv("argument {0} is null", x.name));
    if (reinterpret_cast<uintptr_t>(x.data) % x.alignment)
      return args_error(llvm::formatv("argument {0} ({1}) is not {2}-byte aligned", x.name,
                                      x.data, x.alignment));
  }
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  for (const TensorCheck &t : tensors)
    if (llvm::Error e = check_device_pointer(*driver, t.name, t.data)) return e;
  for (const PointerCheck &x : extra)
    if (llvm::Error e = check_device_pointer(*driver, x.name, x.data)) return e;
  return llvm::Error::success();
}

llvm::Error with_call_context(const char *pass, const Problem &problem, llvm::Error error) {
  if (!error) return error;
  return args_error(llvm::Twine("flashjit ") + pass + " (" + describe(problem) +
                    "): " + llvm::toString(std::move(error)));
}

}  // namespace flashjit
