#include "cli/run_serving.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <random>

#include "cli/random_inputs.h"
#include "cli/run_report.h"
#include "reference/packed_check.h"
#include "runtime/launch_forward.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit::cli {

namespace {

// One input set of the serving call: the packed batch without a cache (Q,
// the keys packed per sequence, O and the LSE it is checked against) and
// the cache the call reads the same keys from.
struct ServingInputs {
  PackedForwardInputs packed;
  DeviceBuffer k_cache, v_cache, seqused_k, page_table;
  ForwardArgs args;
};

// The packed keys `rows` ([total_k, heads_kv, dim]) moved into a cache of
// `width` pages of `page` rows per sequence at the pages `table` names
// (zeros past each sequence's keys: the kernel reads, then masks, the rest
// of a last page).
std::vector<uint16_t> to_cache(const PackedBatch &batch, llvm::ArrayRef<uint16_t> rows,
                               int64_t row_elements, int64_t page, int64_t width,
                               const std::vector<int32_t> &table) {
  std::vector<uint16_t> cache(table.size() * page * row_elements, 0);
  const std::vector<int32_t> cu = batch.cu_seqlens_k();
  for (size_t b = 0; b < batch.size(); ++b)
    for (int64_t n = 0; n < batch.seqlens_k[b]; ++n) {
      const int64_t slot = int64_t(table[b * width + n / page]) * page + n % page;
      std::copy_n(rows.begin() + (cu[b] + n) * row_elements, row_elements,
                  cache.begin() + slot * row_elements);
    }
  return cache;
}

llvm::Expected<ServingInputs> make_serving_inputs(const Problem &p, const Problem &packed,
                                                  const PackedBatch &batch,
                                                  llvm::ArrayRef<uint16_t> q,
                                                  llvm::ArrayRef<uint16_t> k,
                                                  llvm::ArrayRef<uint16_t> v, uint64_t seed) {
  ServingInputs in;
  auto set = make_packed_forward_inputs(packed, batch, q, k, v);
  if (!set) return set.takeError();
  in.packed = std::move(*set);
  in.args = in.packed.args;  // Q, O, the LSE and cu_seqlens_q (and _k) as packed
  std::vector<int32_t> used(batch.seqlens_k.begin(), batch.seqlens_k.end());
  if (p.seqused_k) {
    auto counts = DeviceBuffer::from_host(used.data(), used.size() * sizeof(int32_t));
    if (!counts) return counts.takeError();
    in.seqused_k = std::move(*counts);
    in.args.cache.cache_seqlens = static_cast<const int32_t *>(in.seqused_k.data());
  }
  if (p.page_size == 0) return in;  // contiguous: the packed keys, counted by seqused_k
  // Paged: every sequence's pages at shuffled places of the cache.
  const int64_t page = p.page_size, width = p.seqlen_k / page;
  std::vector<int32_t> table(batch.size() * width);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(seed * 31 + 5));
  const int64_t k_row = p.heads_kv * p.head_dim_qk, v_row = p.heads_kv * p.head_dim_v;
  const std::vector<uint16_t> k_pages = to_cache(batch, k, k_row, page, width, table);
  const std::vector<uint16_t> v_pages = to_cache(batch, v, v_row, page, width, table);
  auto k_cache = DeviceBuffer::from_host(k_pages.data(), k_pages.size() * 2);
  if (!k_cache) return k_cache.takeError();
  auto v_cache = DeviceBuffer::from_host(v_pages.data(), v_pages.size() * 2);
  if (!v_cache) return v_cache.takeError();
  auto dtable = DeviceBuffer::from_host(table.data(), table.size() * sizeof(int32_t));
  if (!dtable) return dtable.takeError();
  in.k_cache = std::move(*k_cache);
  in.v_cache = std::move(*v_cache);
  in.page_table = std::move(*dtable);
  in.args.k = in.k_cache.data();
  in.args.v = in.v_cache.data();
  in.args.k_strides = {page * k_row, k_row, p.head_dim_qk};
  in.args.v_strides = {page * v_row, v_row, p.head_dim_v};
  in.args.cache.page_table = static_cast<const int32_t *>(in.page_table.data());
  in.args.cache.page_table_stride = width;
  in.args.cache.num_pages = static_cast<int64_t>(table.size());
  // The keys are the pages: no packed rows (cu_seqlens_k counts them
  // without seqused_k).
  in.args.varlen.total_k = 0;
  if (p.seqused_k) in.args.varlen.cu_seqlens_k = nullptr;
  return in;
}

}  // namespace

int run_serving(const RunCommand &command, const CommonOptions &common,
                const ResolvedKernel &kernel, const PackedBatch &lengths,
                const DeviceInfo &device) {
  const Problem &p = kernel.problem;
  const KernelSpec &spec = kernel.spec;
  // The same batch without the cache: the inputs' layout, and what the
  // check compares with (each sequence against the GPU reference alone).
  Problem packed = p;
  packed.seqused_k = false;
  packed.page_size = 0;
  packed = resized_packed_problem(packed, lengths);
  const size_t tq = size_t(lengths.total_q()), tk = size_t(lengths.total_k());
  const uint64_t seed = command.seed;
  const std::vector<uint16_t> q = random_normal(p.dtype, tq * p.heads_q * p.head_dim_qk, seed * 4);
  const std::vector<uint16_t> k =
      random_normal(p.dtype, tk * p.heads_kv * p.head_dim_qk, seed * 4 + 1);
  const std::vector<uint16_t> v =
      random_normal(p.dtype, tk * p.heads_kv * p.head_dim_v, seed * 4 + 2);
  const double kv_bytes = double(tk) * p.heads_kv * (p.head_dim_qk + p.head_dim_v) * 2;
  const double set_bytes = kv_bytes + double(q.size()) * 2 + double(tq) * p.heads_q * p.head_dim_v * 2;
  std::vector<ServingInputs> sets;
  for (size_t i = 0, n = rotation_copies(set_bytes, device); i < n; ++i) {
    auto set = make_serving_inputs(p, packed, lengths, q, k, v, seed);
    if (!set) return report_error(kExitFailure, set.takeError());
    sets.push_back(std::move(*set));
  }
  if (auto error = launch_forward(p, sets[0].args, nullptr, spec.config))
    return report_error(kExitFailure, std::move(error));
  if (auto error = synchronize()) return report_error(kExitFailure, std::move(error));
  std::optional<AccuracyReport> accuracy;
  if (command.check) {
    auto report = check_packed_forward_outputs(packed, lengths, sets[0].packed);
    if (!report) return report_error(kExitFailure, report.takeError());
    accuracy = *report;
  }
  size_t next = 0;
  auto timing = time_on_stream(nullptr, command.warmup, command.repeats, [&]() -> llvm::Error {
    return launch_forward(p, sets[next++ % sets.size()].args, nullptr, spec.config);
  });
  if (!timing) return report_error(kExitFailure, timing.takeError());
  const double seconds = timing->median_ms * 1e-3;
  const double tflops = packed_forward_flops(packed, lengths) / seconds / 1e12;
  const double gbps = kv_bytes / seconds / 1e9;

  const std::string cache =
      llvm::formatv("{0}, {1} keys per sequence at most, counts {2}",
                    p.page_size > 0
                        ? llvm::formatv("pages of {0} rows, shuffled", p.page_size).str()
                        : std::string("contiguous"),
                    p.seqlen_k, p.seqused_k ? "from seqused_k" : "from cu_seqlens_k");
  return report_packed_forward_run({spec, device, p, *timing, command.repeats, sets.size(), lengths,
                                    tflops, gbps, accuracy, cache},
                                   common.json);
}

}  // namespace flashjit::cli
