#include "tuner/backward_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "generator/backward_params.h"
#include "generator/backward_steps.h"
#include "generator/block_map.h"
#include "runtime/launch_backward.h"
#include "runtime/tensor_maps.h"
#include "reference/backward_check.h"
#include "reference/cpu_attention.h"
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

llvm::Expected<DeviceBuffer> upload(const void *host, size_t bytes) {
  auto buffer = DeviceBuffer::allocate(bytes);
  if (!buffer) return buffer.takeError();
  if (llvm::Error e = buffer->upload(host, bytes)) return e;
  return std::move(*buffer);
}

// Each step's kernel from `cubin` (`stand_in` instead, when given), with the
// step's shared memory.
llvm::Expected<BackwardKernels> load_steps(const KernelSpec &spec, llvm::ArrayRef<char> cubin,
                                           const std::string *stand_in) {
  BackwardKernels out;
  out.spec = spec;
  out.id = spec.id();
  for (const BackwardStep &step : backward_steps(spec)) {
    auto kernel = LoadedKernel::load(cubin, stand_in ? *stand_in : std::string(step.entry),
                                     step.geometry.dynamic_smem_bytes);
    if (!kernel) return kernel.takeError();
    out.kernels.push_back(std::move(*kernel));
  }
  // A mask_mod's block map: its pre-pass runs before the main kernel, as in
  // a call (a stand-in takes their place too).
  if (has_block_map(spec))
    for (const char *entry :
         {"flashjit_bwd_block_kinds", "flashjit_bwd_block_list", "flashjit_block_mask_grid"}) {
      auto kernel = LoadedKernel::load(cubin, stand_in ? *stand_in : std::string(entry), 0);
      if (!kernel) return kernel.takeError();
      out.block_map.push_back(std::move(*kernel));
    }
  return out;
}

}  // namespace

llvm::Expected<BackwardKernels> BackwardKernels::load(const KernelSpec &spec,
                                                      llvm::ArrayRef<char> cubin,
                                                      const std::string &entry) {
  auto out = load_steps(spec, cubin, nullptr);
  if (!out) return out.takeError();
  // The program's entry is its main kernel: a mismatch means the steps and
  // the generator disagree about what the program holds.
  if (out->main().entry() != entry)
    return error(llvm::formatv("backward program {0}: main kernel {1}, but the steps launch {2}",
                               spec.id(), entry, out->main().entry()));
  return out;
}

llvm::Expected<BackwardKernels> BackwardKernels::stand_in(const KernelSpec &spec,
                                                          llvm::ArrayRef<char> cubin,
                                                          const std::string &entry) {
  return load_steps(spec, cubin, &entry);
}

const LoadedKernel &BackwardKernels::main() const { return kernels[1]; }

llvm::Error BackwardKernels::launch(const Problem &problem, const BackwardArgs &args,
                                    CUstream stream) const {
  BackwardKernelSet set;
  for (size_t i = 0; i < kernels.size() && i < set.steps.size(); ++i) set.steps[i] = &kernels[i];
  if (has_block_map(spec)) {
    set.block_kinds = &block_map[0];
    set.block_list = &block_map[1];
    set.block_mask_grid = &block_map[2];
  }
  set.id = id;
  return enqueue_backward(set, spec, problem, args, stream);
}

llvm::Expected<std::unique_ptr<BackwardBench>> BackwardBench::make(
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

  std::unique_ptr<BackwardBench> bench(new BackwardBench);
  bench->problem_ = problem;
  // A packed batch's tensors hold its tokens (total_q, total_k rows), not
  // batch x the longest lengths; its workspace is per token too.
  const PackedBatch *batch = *packed;
  const auto [q_n, k_n, v_n, o_n, lse_n] = tensor_elements(problem, batch);
  const size_t workspace = batch ? backward_workspace_bytes(problem, batch->total_q())
                                 : backward_workspace_bytes(problem);
  const size_t per_set = 2 * (2 * q_n + 2 * k_n + 2 * v_n + 2 * o_n) + 4 * lse_n + workspace;

  size_t free_bytes = 0, total_bytes = 0;
  if (llvm::Error e = cuda_check(cu.cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo"))
    return e;
  const size_t wanted = size_t(std::ceil(2.0 * device.l2_bytes / double(per_set)));
  const size_t fit = free_bytes / 2 / per_set;
  if (fit < 1)
    return error(llvm::formatv("the backward's tensors need {0} MiB; device {1} has {2} MiB free",
                               per_set >> 20, device.ordinal, free_bytes >> 20));
  const size_t count = std::clamp<size_t>(wanted, 1, std::min<size_t>(fit, 32));

  // One random array read at different offsets for every 16-bit input:
  // what matters for L2 is the addresses, and generating is slow.
  const std::vector<uint16_t> values =
      random_bits(problem.dtype, std::max({q_n, k_n, v_n, o_n}) + 4, 1);
  // Timing needs finite probabilities, not the forward's exact LSE: with
  // unit-variance inputs the scores are about N(0, 1), so the log-sum-exp of
  // a row is about log(seqlen_k) + 1/2, and exp(s - lse) stays in (0, 1].
  const std::vector<float> lse(lse_n, float(std::log(double(problem.seqlen_k)) + 0.5));
  for (size_t i = 0; i < count; ++i) {
    InputSet set;
    if (batch) {
      auto inputs = make_packed_backward_inputs(
          problem, *batch, {values.data(), q_n}, {values.data() + 1, k_n},
          {values.data() + 2, v_n}, {values.data() + 3, o_n}, {values.data() + 4, o_n}, lse);
      if (!inputs) return inputs.takeError();
      set.packed = std::move(*inputs);
      set.args = set.packed->args;
      bench->sets_.push_back(std::move(set));
      continue;
    }
    struct Upload {
      DeviceBuffer *into;
      const void *host;
      size_t bytes;
    };
    const Upload uploads[] = {{&set.q, values.data(), q_n * 2},
                              {&set.k, values.data() + 1, k_n * 2},
                              {&set.v, values.data() + 2, v_n * 2},
                              {&set.o, values.data() + 3, o_n * 2},
                              {&set.dout, values.data() + 4, o_n * 2},
                              {&set.lse, lse.data(), lse_n * 4}};
    for (const Upload &u : uploads) {
      auto buffer = upload(u.host, u.bytes);
      if (!buffer) return buffer.takeError();
      *u.into = std::move(*buffer);
    }
    const std::pair<DeviceBuffer *, size_t> outputs[] = {
        {&set.dq, q_n * 2},
        {&set.dk, k_n * 2},
        {&set.dv, v_n * 2},
        {&set.workspace, workspace},
        {&set.dsinks, modifiers && modifiers->modifiers.sinks ? size_t(problem.heads_q) * 4 : 0}};
    for (auto [into, bytes] : outputs) {
      auto buffer = DeviceBuffer::allocate(bytes);
      if (!buffer) return buffer.takeError();
      *into = std::move(*buffer);
    }
    BackwardArgs args = BackwardArgs::packed(
        problem, set.q.data(), set.k.data(), set.v.data(), set.o.data(), set.dout.data(),
        static_cast<const float *>(set.lse.data()), set.dq.data(), set.dk.data(), set.dv.data(),
        set.workspace.data(), set.workspace.size());
    if (modifiers) modifiers->attach(args, static_cast<float *>(set.dsinks.data()));
    set.args = args;
    bench->sets_.push_back(std::move(set));
  }
  if (llvm::Error e =
          cuda_check(cu.cuStreamCreate(&bench->stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"))
    return e;
  // Copies from pageable memory may still be in flight, and the timing
  // stream does not wait for the legacy stream.
  if (llvm::Error e = check_context_health()) return e;
  return bench;
}

BackwardBench::~BackwardBench() {
  auto driver = cuda_driver();
  if (!driver) {
    llvm::consumeError(driver.takeError());
    return;
  }
  if (stream_) driver->cuStreamDestroy(stream_);
}

llvm::Error BackwardBench::launch(const BackwardKernels &kernels) {
  InputSet &set = sets_[next_++ % sets_.size()];
  return kernels.launch(problem_, set.args, stream_);
}

llvm::Error BackwardBench::failed(llvm::Error e) {
  std::string message = llvm::toString(std::move(e));
  if (llvm::Error health = check_context_health()) {
    broken_ = message + " (then " + llvm::toString(std::move(health)) + ")";
    return error(message + "; the CUDA context is unusable from here on, measuring stops");
  }
  return error(message);
}

llvm::Expected<Measurement> BackwardBench::time(const BackwardKernels &kernels, int repeats) {
  if (!broken_.empty())
    return error("not measured: an earlier kernel broke the context: " + broken_);
  auto m = timer_.time(stream_, repeats, [&] { return launch(kernels); });
  if (!m) return failed(m.takeError());
  return *m;
}

llvm::Error BackwardBench::warm_up(const BackwardKernels &kernels, double ms) {
  auto t = time(kernels, 1);
  if (!t) return t.takeError();
  const int launches = std::clamp(int(ms / std::max(t->median_ms, 1e-3)), 1, 10000);
  for (int i = 0; i < launches; ++i)
    if (llvm::Error e = launch(kernels)) return failed(std::move(e));
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  if (llvm::Error e = cuda_check(driver->cuStreamSynchronize(stream_), "cuStreamSynchronize"))
    return failed(std::move(e));
  return llvm::Error::success();
}

PackedBatch backward_accuracy_packed_batch(const PackedBatch &packed) {
  // Three sequences show the offsets at work at a float64 cost of seconds.
  constexpr size_t kMaxSequences = 3;
  return scaled_packed_batch(packed, kBackwardCheckMaxSeqlen, kMaxSequences);
}

llvm::Expected<GradientAccuracyReport> check_backward_kernels(
    const BackwardKernels &kernels, const Problem &problem,
    const std::optional<PackedBatch> &packed, CUstream stream, TuningDb *store,
    const ModifierInputs *modifiers) {
  auto batch = packed_batch_for(problem, packed);
  if (!batch) return batch.takeError();
  if (modifiers) {
    if (*batch) return error("the accuracy check of a packed batch (varlen) has no modifiers");
    return check_modified_backward(
        backward_accuracy_problem(problem), modifiers->reference_args(),
        [&](const Problem &p, const BackwardArgs &a, CUstream s) { return kernels.launch(p, a, s); },
        stream, store);
  }
  auto launch = [&](const Problem &p, const BackwardArgs &args, CUstream s) {
    return kernels.launch(p, args, s);
  };
  // The heads cut as a dense class's check cuts them; batch and lengths are
  // the small packed batch's (check_packed_backward resizes the problem).
  if (*batch)
    return check_packed_backward(backward_accuracy_problem(problem),
                                 backward_accuracy_packed_batch(**batch), launch, stream);
  return check_backward(
      backward_accuracy_problem(problem),
      [&](const Problem &p, const BackwardArgs &args, CUstream s) {
        return kernels.launch(p, args, s);
      },
      stream);
}

}  // namespace flashjit
