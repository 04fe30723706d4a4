#include "runtime/element_checks.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace {

llvm::Error element_error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

}  // namespace

llvm::Error validate_element_types(const Problem &problem) {
  if (problem.dtype == DType::e4m3 || problem.out_dtype == OutDType::automatic)
    return llvm::Error::success();
  if (out_element(problem) != problem.dtype)
    return element_error(llvm::formatv(
        "out_dtype={0} with dtype={1}: a 16-bit problem's output has its dtype; leave out_dtype "
        "auto",
        to_string(problem.out_dtype), to_string(problem.dtype)));
  return llvm::Error::success();
}

llvm::Error check_descales(const Problem &problem, const Fp8Descales &descale,
                           llvm::SmallVectorImpl<PointerCheck> &pointers) {
  struct Operand {
    const char *argument;
    char tensor;
    const float *data;
    DType element;
  };
  const DType kv = kv_element(problem);
  const Operand operands[] = {{"q_descale", 'Q', descale.q, problem.dtype},
                              {"k_descale", 'K', descale.k, kv},
                              {"v_descale", 'V', descale.v, kv}};
  bool any = false;
  for (const Operand &o : operands) {
    const bool fp8 = o.element == DType::e4m3;
    if (fp8 && !o.data)
      return element_error(llvm::formatv(
          "argument {0} is null: {1} is e4m3 ({2}=e4m3); pass its fp32 dequantization factors "
          "on the device, [batch, heads_kv] or one for the tensor (strides 0)",
          o.argument, o.tensor,
          o.tensor != 'Q' && problem.dtype != DType::e4m3 ? "kv_dtype" : "dtype"));
    if (!fp8 && o.data)
      return element_error(llvm::formatv(
          "argument {0}: given, but {1} is {2}: descales belong to e4m3 tensors (dtype=e4m3, or "
          "kv_dtype=e4m3 for K and V); pass null",
          o.argument, o.tensor, to_string(o.element)));
    any = any || o.data;
  }
  if (!any) return llvm::Error::success();
  // The last factor read is [batch-1][heads_kv-1]: its element offset must
  // fit the kernels' 64-bit byte offsets.
  int64_t last = 0, step = 0;
  if (descale.batch_stride < 0 || descale.head_stride < 0 ||
      __builtin_mul_overflow(descale.batch_stride, problem.batch - 1, &last) ||
      __builtin_mul_overflow(descale.head_stride, problem.heads_kv - 1, &step) ||
      __builtin_add_overflow(last, step, &last) || last > (int64_t(1) << 60))
    return element_error(llvm::formatv(
        "descale strides (batch {0}, head {1}) are invalid: expected element strides >= 0 into "
        "[batch={2}, heads_kv={3}] fp32 factors below 2^60 (both 0: one factor for the tensor)",
        descale.batch_stride, descale.head_stride, problem.batch, problem.heads_kv));
  for (const Operand &o : operands)
    if (o.data) pointers.push_back({o.argument, o.data, alignof(float)});
  return llvm::Error::success();
}

llvm::Error refuse_fp8_backward(const Problem &problem) {
  if (problem.dtype != DType::e4m3 && kv_element(problem) != DType::e4m3)
    return llvm::Error::success();
  return element_error(
      "the fp8 backward is not supported (FlashAttention-3 has none either); run the backward "
      "in bf16 or fp16");
}

}  // namespace flashjit
