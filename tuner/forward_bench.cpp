#include "tuner/forward_bench.h"

#include "runtime/tensor_maps.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "generator/forward_params.h"
#include "reference/cpu_attention.h"
#include "reference/gpu_reference.h"
#include "reference/packed_check.h"
#include "runtime/cuda_driver.h"
#include "tuner/device_context.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

// The reference is naive fp32 attention, O(b h sq sk d) with no tiling: at
// 2048 x 2048 and a few heads it takes milliseconds, at 16k it would not.
constexpr int64_t kAccuracyMaxSeqlen = 2048;

// Approximately normal(0, 1) values in `dtype` (Irwin-Hall of four uniforms),
// never all zeros. splitmix64 rather than <random>: the timing sets of a
// large problem hold tens of millions of elements, generated on every tune.
std::vector<uint16_t> random_bits(DType dtype, size_t n, uint64_t seed) {
  std::vector<uint16_t> out(n);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = next();
    float sum = 0;
    for (int j = 0; j < 4; ++j) sum += float((r >> (16 * j)) & 0xFFFF) / 65536.f;
    out[i] = float_to_bits(dtype, (sum - 2.f) * 1.7320508f);  // variance 4/12 -> 1
  }
  return out;
}

llvm::Expected<DeviceBuffer> upload(const uint16_t *bits, size_t n) {
  auto buffer = DeviceBuffer::allocate(n * sizeof(uint16_t));
  if (!buffer) return buffer.takeError();
  if (llvm::Error e = buffer->upload(bits, n * sizeof(uint16_t))) return e;
  return std::move(*buffer);
}

llvm::Expected<DeviceBuffer> upload(const std::vector<uint16_t> &bits) {
  return upload(bits.data(), bits.size());
}

}  // namespace

llvm::Expected<std::unique_ptr<ForwardBench>> ForwardBench::make(
    const Problem &problem, const std::optional<PackedBatch> &packed_batch,
    const DeviceInfo &device, const ModifierInputs *modifiers) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const CudaDriver &cu = *driver;
  auto packed = packed_batch_for(problem, packed_batch);
  if (!packed) return packed.takeError();
  if (modifiers && *packed)
    return error("a packed batch (varlen) is not timed with modifiers: the tuner's accuracy "
                 "check of a packed batch has no modifiers");

  std::unique_ptr<ForwardBench> bench(new ForwardBench);
  bench->problem_ = problem;
  // A packed batch's tensors hold its tokens (total_q, total_k rows), not
  // batch x the longest lengths.
  const auto [q_n, k_n, v_n, o_n, lse_n] = tensor_elements(problem, *packed);
  bench->bytes_per_set_ = (q_n + k_n + v_n + o_n) * sizeof(uint16_t) + lse_n * sizeof(float);

  size_t free_bytes = 0, total_bytes = 0;
  if (llvm::Error e = cuda_check(cu.cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo"))
    return e;
  const size_t per_set = std::max<size_t>(bench->bytes_per_set_, 1);
  const size_t wanted = size_t(std::ceil(2.0 * device.l2_bytes / double(per_set)));
  const size_t fit = free_bytes / 2 / per_set;
  if (fit < 1)
    return error(llvm::formatv("the problem's tensors need {0} MiB; device {1} has {2} MiB free",
                               per_set >> 20, device.ordinal, free_bytes >> 20));
  const size_t count = std::clamp<size_t>(wanted, 1, std::min<size_t>(fit, 32));

  // The same values in every set, and Q, K and V one random array read at
  // different offsets: what matters for L2 is the addresses, and a large
  // problem's inputs take a while to generate on the host.
  const std::vector<uint16_t> values =
      random_bits(problem.dtype, std::max({q_n, k_n, v_n}) + 2, 1);
  for (size_t i = 0; i < count; ++i) {
    InputSet set;
    if (*packed) {
      auto inputs = make_packed_forward_inputs(problem, **packed, {values.data(), q_n},
                                               {values.data() + 1, k_n}, {values.data() + 2, v_n});
      if (!inputs) return inputs.takeError();
      set.packed = std::move(*inputs);
      set.args = set.packed->args;
      set.params = make_forward_params(problem, set.args);
      bench->sets_.push_back(std::move(set));
      continue;
    }
    auto qb = upload(values.data(), q_n), kb = upload(values.data() + 1, k_n),
         vb = upload(values.data() + 2, v_n);
    if (!qb) return qb.takeError();
    if (!kb) return kb.takeError();
    if (!vb) return vb.takeError();
    set.q = std::move(*qb);
    set.k = std::move(*kb);
    set.v = std::move(*vb);
    auto ob = DeviceBuffer::allocate(o_n * sizeof(uint16_t));
    if (!ob) return ob.takeError();
    set.o = std::move(*ob);
    // The LSE is written as in training (the backward pass reads it).
    auto lb = DeviceBuffer::allocate(lse_n * sizeof(float));
    if (!lb) return lb.takeError();
    set.lse = std::move(*lb);
    set.args = ForwardArgs::packed(problem, set.q.data(), set.k.data(), set.v.data(),
                                   set.o.data(), static_cast<float *>(set.lse.data()));
    auto cache = make_kv_cache_inputs(problem, set.args, KvCacheFill::full_in_order);
    if (!cache) return cache.takeError();
    set.cache = std::move(*cache);
    if (modifiers) modifiers->attach(set.args);
    set.params = make_forward_params(problem, set.args);
    bench->sets_.push_back(std::move(set));
  }
  if (llvm::Error e =
          cuda_check(cu.cuStreamCreate(&bench->stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"))
    return e;
  // A copy from pageable memory may still be in flight when cuMemcpyHtoD
  // returns, and the timing stream does not wait for the legacy stream.
  if (llvm::Error e = check_context_health()) return e;
  return bench;
}

ForwardBench::~ForwardBench() {
  auto driver = cuda_driver();
  if (!driver) {
    llvm::consumeError(driver.takeError());
    return;
  }
  if (stream_) driver->cuStreamDestroy(stream_);
}

llvm::Error ForwardBench::launch(const ForwardKernels &kernels, const KernelSpec &spec) {
  InputSet &set = sets_[next_++ % sets_.size()];
  const int splits =
      forward_num_splits(spec, problem_, spec.config.splits, kernels.main->sm_count());
  return enqueue_forward(kernels, spec, problem_, set.args, set.params, splits, stream_);
}

llvm::Error ForwardBench::failed(llvm::Error e) {
  std::string message = llvm::toString(std::move(e));
  if (llvm::Error health = check_context_health()) {
    broken_ = message + " (then " + llvm::toString(std::move(health)) + ")";
    return error(message + "; the CUDA context is unusable from here on, measuring stops");
  }
  return error(message);
}

llvm::Error ForwardBench::warm_up(const ForwardKernels &kernels, const KernelSpec &spec,
                                  double ms) {
  auto t = time(kernels, spec, 1);
  if (!t) return t.takeError();
  const int launches = std::clamp(int(ms / std::max(t->median_ms, 1e-3)), 1, 10000);
  for (int i = 0; i < launches; ++i)
    if (llvm::Error e = launch(kernels, spec)) return failed(std::move(e));
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  if (llvm::Error e = cuda_check(driver->cuStreamSynchronize(stream_), "cuStreamSynchronize"))
    return failed(std::move(e));
  return llvm::Error::success();
}

llvm::Expected<Measurement> ForwardBench::time(const ForwardKernels &kernels,
                                               const KernelSpec &spec, int repeats) {
  if (!broken_.empty()) return error("not measured: an earlier kernel broke the context: " + broken_);
  auto m = timer_.time(stream_, repeats, [&] { return launch(kernels, spec); });
  if (!m) return failed(m.takeError());
  return *m;
}

Problem accuracy_problem(const Problem &problem) {
  constexpr int64_t kMaxBatchHeads = 16;
  Problem p = problem;
  p.seqlen_q = std::min(p.seqlen_q, kAccuracyMaxSeqlen);
  p.seqlen_k = std::min(p.seqlen_k, kAccuracyMaxSeqlen);
  // A paged cache's capacity stays whole pages.
  if (p.page_size > 0) p.seqlen_k = std::max<int64_t>(p.page_size, p.seqlen_k / p.page_size * p.page_size);
  const bool small = p.seqlen_q == problem.seqlen_q && p.seqlen_k == problem.seqlen_k &&
                     p.batch * p.heads_q <= kMaxBatchHeads;
  if (!small) {
    // Two KV heads still exercise the head indexing; the ratio keeps the
    // GQA mapping of the class.
    const int64_t ratio = p.heads_kv > 0 ? std::max<int64_t>(1, p.heads_q / p.heads_kv) : 1;
    p.batch = 1;
    p.heads_kv = std::min<int64_t>(p.heads_kv, ratio > 8 ? 1 : 2);
    p.heads_q = p.heads_kv * ratio;
  }
  return p;
}

PackedBatch accuracy_packed_batch(const PackedBatch &packed) {
  // Four sequences show the offsets at work (a sequence that starts
  // mid-tile, one that ends early) at a fraction of the whole batch's cost.
  constexpr size_t kMaxSequences = 4;
  return scaled_packed_batch(packed, kAccuracyMaxSeqlen, kMaxSequences);
}

namespace {

llvm::Expected<AccuracyReport> check_packed_forward_kernel(const ForwardKernels &kernels,
                                                           const KernelSpec &spec,
                                                           const Problem &problem,
                                                           const PackedBatch &packed,
                                                           CUstream stream, TuningDb *store) {
  const PackedBatch small = accuracy_packed_batch(packed);
  // The heads cut as a dense class's check cuts them; batch and lengths
  // are the small batch's.
  const Problem p = resized_packed_problem(accuracy_problem(problem), small);
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const int64_t tq = small.total_q(), tk = small.total_k();
  auto in = make_packed_forward_inputs(
      p, small, random_bits(p.dtype, size_t(tq * p.heads_q * p.head_dim_qk), 11),
      random_bits(p.dtype, size_t(tk * p.heads_kv * p.head_dim_qk), 12),
      random_bits(p.dtype, size_t(tk * p.heads_kv * p.head_dim_v), 13));
  if (!in) return in.takeError();
  // Uploads and the NaN poison run on the legacy stream, which `stream`
  // (created non-blocking) does not wait for.
  if (llvm::Error e = check_context_health()) return e;
  const int splits = forward_num_splits(spec, p, spec.config.splits, kernels.main->sm_count());
  if (llvm::Error e = enqueue_forward(kernels, spec, p, in->args,
                                     make_forward_params(p, in->args), splits, stream))
    return e;
  if (llvm::Error e = cuda_check(driver->cuStreamSynchronize(stream), "cuStreamSynchronize"))
    return e;
  return check_packed_forward_outputs(p, small, *in, store);
}

}  // namespace

llvm::Expected<AccuracyReport> check_forward_kernel(const ForwardKernels &kernels,
                                                    const KernelSpec &spec, const Problem &problem,
                                                    const std::optional<PackedBatch> &packed,
                                                    CUstream stream, TuningDb *store,
                                                    const ModifierInputs *modifiers) {
  auto batch = packed_batch_for(problem, packed);
  if (!batch) return batch.takeError();
  if (*batch && modifiers)
    return error("the accuracy check of a packed batch (varlen) has no modifiers");
  if (*batch) return check_packed_forward_kernel(kernels, spec, problem, **batch, stream, store);
  const Problem p = accuracy_problem(problem);
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  auto q = upload(random_bits(p.dtype, q_elements(p), 11));
  if (!q) return q.takeError();
  auto k = upload(random_bits(p.dtype, k_elements(p), 12));
  if (!k) return k.takeError();
  auto v = upload(random_bits(p.dtype, v_elements(p), 13));
  if (!v) return v.takeError();
  auto o = DeviceBuffer::allocate(o_elements(p) * sizeof(uint16_t));
  if (!o) return o.takeError();
  auto lse = DeviceBuffer::allocate(lse_elements(p) * sizeof(float));
  if (!lse) return lse.takeError();
  // NaN everywhere: whatever the kernel does not write stays NaN and fails.
  if (llvm::Error e = o->fill_bytes(0xFF)) return e;
  if (llvm::Error e = lse->fill_bytes(0xFF)) return e;
  // Uploads and memsets run on the legacy stream, which `stream` (created
  // non-blocking) does not wait for: without this the poison could land
  // after the kernel's output.
  if (llvm::Error e = check_context_health()) return e;

  // The reference reads the dense tensors; the kernel the same bytes as a
  // KV cache when the class has one (every sequence full, pages in order).
  ForwardArgs args = ForwardArgs::packed(p, q->data(), k->data(), v->data(), o->data(),
                                         static_cast<float *>(lse->data()));
  if (modifiers) modifiers->attach(args);
  ForwardArgs kernel_args = args;
  auto cache = make_kv_cache_inputs(p, kernel_args, KvCacheFill::full_in_order);
  if (!cache) return cache.takeError();
  // As a call runs it: the config's split count (clamped to this problem's
  // key tiles), the workspace and the combine kernel where it splits.
  const int splits = forward_num_splits(spec, p, spec.config.splits, kernels.main->sm_count());
  if (llvm::Error e = enqueue_forward(kernels, spec, p, kernel_args,
                                     make_forward_params(p, kernel_args), splits, stream))
    return e;
  if (llvm::Error e = cuda_check(driver->cuStreamSynchronize(stream), "cuStreamSynchronize"))
    return e;

  std::vector<uint16_t> o_bits(o_elements(p));
  std::vector<float> lse_values(lse_elements(p));
  if (llvm::Error e = o->download(o_bits.data(), o_bits.size() * sizeof(uint16_t)))
    return e;
  if (llvm::Error e = lse->download(lse_values.data(), lse_values.size() * sizeof(float)))
    return e;
  auto exact = gpu_reference_attention(p, args, ReferencePrecision::exact, stream, store);
  if (!exact) return exact.takeError();
  auto element = gpu_reference_attention(p, args, ReferencePrecision::element, stream, store);
  if (!element) return element.takeError();
  const std::vector<float> out = from_storage(p.dtype, o_bits);
  return check_forward_accuracy(out, exact->out, element->out, lse_values, exact->lse);
}

}  // namespace flashjit
