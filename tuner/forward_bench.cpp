#include "tuner/forward_bench.h"

#include "runtime/tensor_maps.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "generator/forward_params.h"
#include "reference/cpu_attention.h"
#include "reference/fp8_check.h"
#include "reference/forward_inputs.h"
#include "reference/gpu_reference.h"
#include "reference/packed_check.h"
#include "runtime/cuda_driver.h"
#include "tuner/device_context.h"
#include "tuner/timing_inputs.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

// The reference is naive fp32 attention, O(b h sq sk d) with no tiling: at
// 2048 x 2048 and a few heads it takes milliseconds, at 16k it would not.
constexpr int64_t kAccuracyMaxSeqlen = 2048;

llvm::Expected<DeviceBuffer> upload(const uint16_t *bits, size_t n) {
  auto buffer = DeviceBuffer::allocate(n * sizeof(uint16_t));
  if (!buffer) return buffer.takeError();
  if (llvm::Error e = buffer->upload(bits, n * sizeof(uint16_t))) return e;
  return std::move(*buffer);
}

llvm::Expected<DeviceBuffer> upload(const std::vector<uint16_t> &bits) {
  return upload(bits.data(), bits.size());
}

bool has_fp8_inputs(const Problem &p) {
  return p.dtype == DType::e4m3 || kv_element(p) == DType::e4m3;
}

// A dense timing set's Q, K and V: `bytes` read at element offsets 0, 1 and
// 2 of their element types (the same values in every set: what matters for
// L2 is the addresses), and the descales of the e4m3 ones, all
// kTimingE4m3Descale, [batch, heads_kv] each.
llvm::Error upload_timing_tensors(const Problem &p, const TensorElements &n,
                                  const std::vector<uint8_t> &q_values,
                                  const std::vector<uint8_t> &kv_values, DeviceBuffer &q,
                                  DeviceBuffer &k, DeviceBuffer &v, DeviceBuffer &descale,
                                  Fp8Descales &descales) {
  const size_t q_size = size_t(element_bytes(p.dtype));
  const size_t kv_size = size_t(element_bytes(kv_element(p)));
  const std::pair<DeviceBuffer *, std::pair<const uint8_t *, size_t>> tensors[] = {
      {&q, {q_values.data(), n.q * q_size}},
      {&k, {kv_values.data() + kv_size, n.k * kv_size}},
      {&v, {kv_values.data() + 2 * kv_size, n.v * kv_size}}};
  for (const auto &[buffer, host] : tensors) {
    auto copy = DeviceBuffer::from_host(host.first, host.second);
    if (!copy) return copy.takeError();
    *buffer = std::move(*copy);
  }
  const size_t grid = size_t(p.batch * p.heads_kv);
  if (!has_fp8_inputs(p)) return llvm::Error::success();
  const std::vector<float> factors(3 * grid, kTimingE4m3Descale);
  auto copy = DeviceBuffer::from_host(factors.data(), factors.size() * sizeof(float));
  if (!copy) return copy.takeError();
  descale = std::move(*copy);
  const float *base = static_cast<const float *>(descale.data());
  const bool q_fp8 = p.dtype == DType::e4m3, kv_fp8 = kv_element(p) == DType::e4m3;
  descales = {q_fp8 ? base : nullptr, kv_fp8 ? base + grid : nullptr,
              kv_fp8 ? base + 2 * grid : nullptr, p.heads_kv, 1};
  return llvm::Error::success();
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
  const TensorElements elements = tensor_elements(problem, *packed);
  const auto [q_n, k_n, v_n, o_n, lse_n] = elements;
  const TimingSetBytes set_bytes = timing_set_bytes(problem, elements);
  bench->bytes_per_set_ = set_bytes.total();
  if (*packed && has_fp8_inputs(problem))
    return error("an fp8 (e4m3) varlen class is not timed yet: the tuner's packed batches are "
                 "16-bit; tune the dense class (the kernel is the same but for its offsets)");

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
  const size_t most = std::max({q_n, k_n, v_n}) + 2;
  const std::vector<uint16_t> values = *packed ? random_bits(problem.dtype, most, 1)
                                               : std::vector<uint16_t>();
  const std::vector<uint8_t> q_values =
      *packed ? std::vector<uint8_t>() : random_storage(problem.dtype, most, 1);
  // K and V share Q's array unless their element differs (an fp8 cache).
  const std::vector<uint8_t> kv_storage = !*packed && kv_element(problem) != problem.dtype
                                              ? random_storage(kv_element(problem), most, 1)
                                              : std::vector<uint8_t>();
  const std::vector<uint8_t> &kv_values = kv_storage.empty() ? q_values : kv_storage;
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
    Fp8Descales descales;
    if (llvm::Error e = upload_timing_tensors(problem, elements, q_values, kv_values, set.q,
                                              set.k, set.v, set.descale, descales))
      return e;
    auto ob = DeviceBuffer::allocate(set_bytes.o);
    if (!ob) return ob.takeError();
    set.o = std::move(*ob);
    // The LSE is written as in training (the backward pass reads it).
    auto lb = DeviceBuffer::allocate(lse_n * sizeof(float));
    if (!lb) return lb.takeError();
    set.lse = std::move(*lb);
    set.args = ForwardArgs::packed(problem, set.q.data(), set.k.data(), set.v.data(),
                                   set.o.data(), static_cast<float *>(set.lse.data()));
    set.args.descale = descales;
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

// The output and LSE of a checked call, NaN everywhere: whatever the kernel
// does not write stays NaN and fails. Uploads and memsets run on the legacy
// stream, which the check's stream (created non-blocking) does not wait
// for: without the health check the poison could land after the output.
llvm::Expected<std::pair<DeviceBuffer, DeviceBuffer>> poisoned_outputs(const Problem &p) {
  auto o = DeviceBuffer::allocate(o_elements(p) * size_t(element_bytes(out_element(p))));
  if (!o) return o.takeError();
  auto lse = DeviceBuffer::allocate(lse_elements(p) * sizeof(float));
  if (!lse) return lse.takeError();
  if (llvm::Error e = o->fill_bytes(0xFF)) return e;
  if (llvm::Error e = lse->fill_bytes(0xFF)) return e;
  if (llvm::Error e = check_context_health()) return e;
  return std::make_pair(std::move(*o), std::move(*lse));
}

// Runs the kernels on the dense tensors of `args` as a call does, then
// waits: the same bytes as a KV cache when the class has one (every
// sequence full, pages in order), the config's split count (clamped to
// this problem's key tiles), the workspace and the combine kernel where it
// splits. The reference reads `args` itself.
llvm::Error run_as_call(const ForwardKernels &kernels, const KernelSpec &spec, const Problem &p,
                        const ForwardArgs &args, CUstream stream) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  ForwardArgs kernel_args = args;
  auto cache = make_kv_cache_inputs(p, kernel_args, KvCacheFill::full_in_order);
  if (!cache) return cache.takeError();
  const int splits = forward_num_splits(spec, p, spec.config.splits, kernels.main->sm_count());
  if (llvm::Error e = enqueue_forward(kernels, spec, p, kernel_args,
                                     make_forward_params(p, kernel_args), splits, stream))
    return e;
  return cuda_check(driver->cuStreamSynchronize(stream), "cuStreamSynchronize");
}

// An fp8 class's winner (`p` already the accuracy problem): standard-normal
// inputs quantized per (batch, KV head), as `run --check` draws them, under
// the fp8 criterion against the reference of the de-quantized inputs.
llvm::Expected<AccuracyReport> check_fp8_forward_kernel(const ForwardKernels &kernels,
                                                        const KernelSpec &spec, const Problem &p,
                                                        CUstream stream, TuningDb *store,
                                                        const ModifierInputs *modifiers) {
  const ForwardHostInputs in = make_forward_inputs(p, 11);
  auto device_in = upload_forward_inputs(in);
  if (!device_in) return device_in.takeError();
  auto outputs = poisoned_outputs(p);
  if (!outputs) return outputs.takeError();
  auto &[o, lse] = *outputs;
  ForwardArgs args = ForwardArgs::packed(p, device_in->q.data(), device_in->k.data(),
                                         device_in->v.data(), o.data(),
                                         static_cast<float *>(lse.data()));
  args.descale = device_in->descale(p);
  if (modifiers) modifiers->attach(args);
  if (llvm::Error e = run_as_call(kernels, spec, p, args, stream)) return e;
  return check_fp8_forward_outputs(p, args, in, o, lse, stream, store);
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
  if (has_fp8_inputs(p))
    return check_fp8_forward_kernel(kernels, spec, p, stream, store, modifiers);
  auto q = upload(random_bits(p.dtype, q_elements(p), 11));
  if (!q) return q.takeError();
  auto k = upload(random_bits(p.dtype, k_elements(p), 12));
  if (!k) return k.takeError();
  auto v = upload(random_bits(p.dtype, v_elements(p), 13));
  if (!v) return v.takeError();
  auto outputs = poisoned_outputs(p);
  if (!outputs) return outputs.takeError();
  auto &[o, lse] = *outputs;
  ForwardArgs args = ForwardArgs::packed(p, q->data(), k->data(), v->data(), o.data(),
                                         static_cast<float *>(lse.data()));
  if (modifiers) modifiers->attach(args);
  if (llvm::Error e = run_as_call(kernels, spec, p, args, stream)) return e;

  std::vector<uint16_t> o_bits(o_elements(p));
  std::vector<float> lse_values(lse_elements(p));
  if (llvm::Error e = o.download(o_bits.data(), o_bits.size() * sizeof(uint16_t))) return e;
  if (llvm::Error e = lse.download(lse_values.data(), lse_values.size() * sizeof(float)))
    return e;
  auto exact = gpu_reference_attention(p, args, ReferencePrecision::exact, stream, store);
  if (!exact) return exact.takeError();
  auto element = gpu_reference_attention(p, args, ReferencePrecision::element, stream, store);
  if (!element) return element.takeError();
  const std::vector<float> out = from_storage(p.dtype, o_bits);
  return check_forward_accuracy(out, exact->out, element->out, lse_values, exact->lse);
}

}  // namespace flashjit
