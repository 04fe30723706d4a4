#include "runtime/tensor_checks.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace {

llvm::Error args_error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

// The kernels move rows with 16-byte vector loads and stores (8 elements of
// a 16-bit type, 16 of e4m3): every row start must be 16-byte aligned, so
// base pointers must be and strides must be multiples of 16 bytes' elements.
constexpr int kVectorBytes = 16;

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
  const int vector_elements = kVectorBytes / std::max(t.element_bytes, 1);
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
    if (s.extent > 1 && s.value % vector_elements)
      return args_error(llvm::formatv(
          "argument {0}: {1} stride {2} is not a multiple of {3} elements: the kernel uses "
          "{4}-byte vector loads, so every row must start {4}-byte aligned",
          t.name, s.what, s.value, vector_elements, kVectorBytes));
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

llvm::Error check_varlen_args(const Problem &problem, const VarlenArgs &varlen) {
  const bool given = varlen.cu_seqlens_q || varlen.cu_seqlens_k || varlen.total_q ||
                     varlen.total_k || varlen.seqused_q || varlen.seqused_k;
  if (!problem.varlen) {
    if (!given) return llvm::Error::success();
    return args_error("varlen arguments (cu_seqlens_q/k, total_q/k, seqused_q/k) were given for a "
                      "problem that is not a packed batch: set Problem::varlen");
  }
  // Over a paged cache with seqused_k (vLLM's call) the keys need no
  // offsets: each sequence's count is seqused_k[b], its rows its pages.
  const bool paged = problem.page_size > 0;
  const bool keys_from_cache = paged && problem.seqused_k;
  if (!varlen.cu_seqlens_q || (!varlen.cu_seqlens_k && !keys_from_cache))
    return args_error(
        "varlen.cu_seqlens_q and cu_seqlens_k are required for a packed batch: int32 [batch + 1] "
        "device arrays of each sequence's first row (0 first, the total last); cu_seqlens_k may "
        "be null only over a paged cache with per-sequence key counts (seqused_k)");
  if (paged && varlen.total_k != 0)
    return args_error(llvm::formatv(
        "varlen.total_k={0} was given for a packed batch over a paged cache (page_size={1}): "
        "its keys are the cache's pages, not packed rows; pass 0",
        varlen.total_k, problem.page_size));
  constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max();
  for (auto [name, side, rows, longest] :
       {std::tuple{"total_q", 'q', varlen.total_q, problem.seqlen_q},
        std::tuple{"total_k", 'k', varlen.total_k, paged ? int64_t(0) : problem.seqlen_k}}) {
    if (rows < 0 || rows > kMaxRows)
      return args_error(llvm::formatv("varlen.{0}={1} is invalid: expected 0 to 2^31-1 rows (the "
                                      "packed tensor's first dimension)",
                                      name, rows));
    if (rows > 0 && longest > rows)
      return args_error(llvm::formatv("varlen.{0}={1} is less than the longest sequence's length "
                                      "{2} (seqlen_{3}, max_seqlen_{3}): the maximum is at most "
                                      "the total",
                                      name, rows, longest, side));
  }
  return llvm::Error::success();
}

RowExtent query_extent(const Problem &problem, const VarlenArgs &varlen) {
  if (problem.varlen) return {1, std::max<int64_t>(varlen.total_q, 1)};
  return {problem.batch, problem.seqlen_q};
}

RowExtent key_extent(const Problem &problem, const VarlenArgs &varlen) {
  if (problem.varlen) return {1, std::max<int64_t>(varlen.total_k, 1)};
  return {problem.batch, problem.seqlen_k};
}

RowExtent forward_key_extent(const Problem &problem, const ForwardArgs &args) {
  if (problem.page_size > 0) return {args.cache.num_pages, problem.page_size};
  const RowExtent keys = key_extent(problem, args.varlen);
  if (args.cache.cache_batch_idx) return {args.cache.cache_batches, keys.rows};
  return keys;
}

llvm::Error with_call_context(const char *pass, const Problem &problem, llvm::Error error) {
  if (!error) return error;
  return args_error(llvm::Twine("flashjit ") + pass + " (" + describe(problem) +
                    "): " + llvm::toString(std::move(error)));
}

}  // namespace flashjit
