// The serving call: a packed batch of queries (cu_seqlens_q)
// over a KV cache, with per-sequence key counts (seqused_k) and/or a paged
// cache read through a block table. Mixed decode (one query) and prefill
// (hundreds) sequences, 0 cached keys, shuffled page tables at page sizes
// 16/64/256, GQA, causal/window/softcap, both dtypes and families, against
// a float64 reference computed sequence by sequence on the keys each one
// has, bottom-right aligned, with the accuracy criterion (reference/accuracy.h). Pages no sequence
// uses hold NaN (a read of one poisons the result); table entries past a
// sequence's keys point outside the cache; outputs are poisoned before the
// run. The same data through the dense KV-cache call and the packed
// call without a cache gives the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "forward_check.h"

namespace flashjit {
namespace {

using testing::kNaNBits;
using testing::make_problem;
using testing::random_values;
using testing::upload_bits;
using testing::upload_ints;

struct ServingCase {
  Problem problem;         // heads, dims, mask, softcap, dtype, page_size
  std::vector<int> lens_q;  // queries per sequence
  std::vector<int> keys;    // keys per sequence (seqused_k)
  int64_t capacity = 0;     // keys the table holds per sequence (a multiple of the page)
  bool counts_from_offsets = false;  // no seqused_k: cu_seqlens_k's differences
  KernelConfig config = {};
  std::string name() const {
    std::string s = describe(problem) + " q=[";
    for (int l : lens_q) s += std::to_string(l) + ",";
    s += "] k=[";
    for (int l : keys) s += std::to_string(l) + ",";
    s += "] cap=" + std::to_string(capacity);
    if (counts_from_offsets) s += " counts-from-offsets";
    if (config.path != KernelPath::automatic) s += std::string(" ") + to_string(config.path);
    return s;
  }
};

std::vector<int32_t> prefix_sums(const std::vector<int> &lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  return cu;
}

// The inputs of one serving case, as host values and device buffers.
struct ServingData {
  Problem problem;  // the packed problem: batch, longest queries, capacity
  int64_t total_q = 0, num_pages = 0, width = 0, page = 0;
  std::vector<float> q, k_log, v_log;  // k_log/v_log: [batch][capacity][heads_kv][dim]
  std::vector<int32_t> cu_q, cu_k, table;
  DeviceBuffer dq, dk, dv, dout, dlse, dcu_q, dcu_k, dkeys, dtable;
  ForwardArgs args;
};

llvm::Expected<ServingData> make_serving_data(const ServingCase &c, uint64_t seed) {
  ServingData s;
  Problem &p = s.problem;
  p = c.problem;
  p.varlen = true;
  p.batch = static_cast<int64_t>(c.lens_q.size());
  p.seqlen_q = std::max(1, *std::max_element(c.lens_q.begin(), c.lens_q.end()));
  p.seqlen_k = c.capacity;
  p.seqused_k = !c.counts_from_offsets;
  const int64_t b_n = p.batch, hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim_qk,
                dv = p.head_dim_v, cap = c.capacity;
  const bool paged = p.page_size > 0;
  s.page = paged ? p.page_size : 0;
  s.width = paged ? cap / s.page : 0;
  const int64_t spare = 3;  // pages no sequence uses: NaN
  s.num_pages = paged ? b_n * s.width + spare : 0;
  s.cu_q = prefix_sums(c.lens_q);
  s.total_q = s.cu_q.back();
  s.q = random_values(p.dtype, std::max<int64_t>(s.total_q, 1) * hq * d, seed);
  s.k_log = random_values(p.dtype, b_n * cap * hkv * d, seed + 1);
  s.v_log = random_values(p.dtype, b_n * cap * hkv * dv, seed + 2);

  std::vector<uint16_t> k_store, v_store;
  if (paged) {
    std::mt19937_64 rng(seed + 3);
    std::vector<int32_t> order(s.num_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    s.table.assign(order.begin(), order.begin() + b_n * s.width);
    k_store.assign(s.num_pages * s.page * hkv * d, kNaNBits);
    v_store.assign(s.num_pages * s.page * hkv * dv, kNaNBits);
    for (int64_t b = 0; b < b_n; ++b)
      for (int64_t n = 0; n < cap; ++n) {
        const int64_t outer = s.table[b * s.width + n / s.page], row = n % s.page;
        for (int64_t h = 0; h < hkv; ++h) {
          for (int64_t x = 0; x < d; ++x)
            k_store[((outer * s.page + row) * hkv + h) * d + x] =
                float_to_bits(p.dtype, s.k_log[((b * cap + n) * hkv + h) * d + x]);
          for (int64_t x = 0; x < dv; ++x)
            v_store[((outer * s.page + row) * hkv + h) * dv + x] =
                float_to_bits(p.dtype, s.v_log[((b * cap + n) * hkv + h) * dv + x]);
        }
      }
    // Entries past a sequence's keys are never read: make them invalid.
    for (int64_t b = 0; b < b_n; ++b)
      for (int64_t e = (c.keys[b] + s.page - 1) / s.page; e < s.width; ++e)
        s.table[b * s.width + e] = e % 2 ? -7 : static_cast<int32_t>(s.num_pages + 100);
    // Without seqused_k the counts are cu_seqlens_k's differences.
    s.cu_k = prefix_sums(c.keys);
  } else {
    // Packed keys: each sequence's whole capacity (finite values past its
    // count, which a tile may load and the mask must hide), seqused_k of them used.
    std::vector<int> alloc(b_n, static_cast<int>(cap));
    s.cu_k = prefix_sums(alloc);
    k_store = to_storage(p.dtype, s.k_log);
    v_store = to_storage(p.dtype, s.v_log);
  }

  auto dq = testing::upload_values(p.dtype, s.q);
  auto dk = upload_bits(k_store);
  auto dv_buf = upload_bits(v_store);
  auto dout = DeviceBuffer::allocate(std::max<int64_t>(s.total_q, 1) * hq * dv * 2);
  auto dlse = DeviceBuffer::allocate(std::max<int64_t>(s.total_q, 1) * hq * 4);
  auto dcu_q = upload_ints(s.cu_q);
  auto dcu_k = upload_ints(s.cu_k);
  auto dkeys = upload_ints(std::vector<int32_t>(c.keys.begin(), c.keys.end()));
  auto dtable = upload_ints(s.table);
  for (auto *buffer : {&dq, &dk, &dv_buf, &dout, &dlse, &dcu_q, &dcu_k, &dkeys, &dtable})
    if (!*buffer) return buffer->takeError();
  s.dq = std::move(*dq);
  s.dk = std::move(*dk);
  s.dv = std::move(*dv_buf);
  s.dout = std::move(*dout);
  s.dlse = std::move(*dlse);
  s.dcu_q = std::move(*dcu_q);
  s.dcu_k = std::move(*dcu_k);
  s.dkeys = std::move(*dkeys);
  s.dtable = std::move(*dtable);
  if (auto e = s.dout.fill_bytes(0xff)) return e;
  if (auto e = s.dlse.fill_bytes(0xff)) return e;

  ForwardArgs &a = s.args;
  a.q = s.dq.data();
  a.k = s.dk.data();
  a.v = s.dv.data();
  a.o = s.dout.data();
  a.lse = static_cast<float *>(s.dlse.data());
  a.q_strides = {0, hq * d, d};
  a.o_strides = {0, hq * dv, dv};
  a.varlen.cu_seqlens_q = static_cast<const int32_t *>(s.dcu_q.data());
  a.varlen.total_q = s.total_q;
  if (p.seqused_k) a.cache.cache_seqlens = static_cast<const int32_t *>(s.dkeys.data());
  if (paged) {
    a.k_strides = {s.page * hkv * d, hkv * d, d};
    a.v_strides = {s.page * hkv * dv, hkv * dv, dv};
    a.cache.page_table = static_cast<const int32_t *>(s.dtable.data());
    a.cache.page_table_stride = s.width;
    a.cache.num_pages = s.num_pages;
    // vLLM passes no key offsets beside seqused_k.
    if (c.counts_from_offsets) a.varlen.cu_seqlens_k = static_cast<const int32_t *>(s.dcu_k.data());
  } else {
    a.k_strides = {0, hkv * d, d};
    a.v_strides = {0, hkv * dv, dv};
    a.varlen.cu_seqlens_k = static_cast<const int32_t *>(s.dcu_k.data());
    a.varlen.total_k = s.cu_k.back();
  }
  return s;
}

void run_serving_case(const ServingCase &c, uint64_t seed) {
  SCOPED_TRACE(c.name());
  auto data = make_serving_data(c, seed);
  FLASHJIT_ASSERT_OK(data.takeError());
  const Problem &p = data->problem;
  const int64_t hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim_qk, dv = p.head_dim_v;
  const int64_t cap = c.capacity, total_q = data->total_q;
  FLASHJIT_ASSERT_OK(launch_forward(p, data->args, nullptr, c.config));
  if (total_q == 0) return;
  auto out = testing::download_values(p.dtype, data->dout, total_q * hq * dv);
  FLASHJIT_ASSERT_OK(out.takeError());
  std::vector<float> lse(total_q * hq);
  FLASHJIT_ASSERT_OK(data->dlse.download(lse.data(), lse.size() * 4));

  std::vector<float> got_out, got_lse, exact_out, element_out, exact_lse;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t q0 = data->cu_q[b], lq = c.lens_q[b], lk = c.keys[b];
    if (lq == 0) continue;
    AttentionOutputs e, m;
    if (lk == 0) {  // no key: O = 0, LSE = +inf
      e.out.assign(lq * hq * dv, 0.f);
      e.lse.assign(hq * lq, INFINITY);
      m = e;
    } else {
      Problem one = p;
      one.varlen = one.seqused_k = false;
      one.page_size = 0;
      one.batch = 1;
      one.seqlen_q = lq;
      one.seqlen_k = lk;
      const std::vector<float> qb(data->q.begin() + q0 * hq * d,
                                  data->q.begin() + (q0 + lq) * hq * d);
      const std::vector<float> kb(data->k_log.begin() + b * cap * hkv * d,
                                  data->k_log.begin() + (b * cap + lk) * hkv * d);
      const std::vector<float> vb(data->v_log.begin() + b * cap * hkv * dv,
                                  data->v_log.begin() + (b * cap + lk) * hkv * dv);
      e = cpu_attention(one, qb, kb, vb, ReferencePrecision::exact);
      m = cpu_attention(one, qb, kb, vb, ReferencePrecision::element);
    }
    exact_out.insert(exact_out.end(), e.out.begin(), e.out.end());
    element_out.insert(element_out.end(), m.out.begin(), m.out.end());
    got_out.insert(got_out.end(), out->begin() + q0 * hq * dv, out->begin() + (q0 + lq) * hq * dv);
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < lq; ++i) {
        exact_lse.push_back(e.lse[h * lq + i]);
        got_lse.push_back(lse[h * total_q + q0 + i]);
      }
  }
  AccuracyReport report =
      check_forward_accuracy(got_out, exact_out, element_out, got_lse, exact_lse);
  EXPECT_TRUE(report.passed) << report.describe();
}

std::vector<ServingCase> serving_cases() {
  std::vector<ServingCase> cases;
  // Decode sequences (1 query) beside prefill chunks, 0 cached keys among
  // them; the float64 reference's work stays below ~4e8 multiply-adds.
  const std::vector<std::vector<int>> q_lengths = {
      {1, 1, 300, 1, 17, 1}, {200, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1}, {64, 0, 113, 1}};
  const std::vector<std::vector<int>> key_counts = {
      {2000, 0, 700, 1, 17, 1500}, {512, 3000, 1, 0}, {900, 0, 1, 2048, 40, 1300, 7, 300},
      {64, 5, 113, 2047}};
  const int pages[] = {16, 64, 256, 0};
  const std::pair<int64_t, int64_t> heads[] = {{8, 2}, {16, 4}, {8, 8}, {32, 8}};
  int n = 0;
  for (int page : pages)
    for (size_t i = 0; i < q_lengths.size(); ++i, ++n) {
      const auto [hq, hkv] = heads[(i + n) % 4];
      const int d = (int[]){128, 64, 256, 96}[n % 4];
      const DType dtype = n % 2 ? DType::fp16 : DType::bf16;
      const MaskKind mask =
          (MaskKind[]){MaskKind::causal, MaskKind::none, MaskKind::window}[(i + n) % 3];
      Problem p = make_problem(dtype, 1, hq, hkv, 1, 1, d, d, mask,
                               mask == MaskKind::window ? 256 : -1,
                               mask == MaskKind::window ? 0 : -1, n % 5 == 3 ? 30.f : 0.f);
      p.page_size = page;
      const int64_t longest = *std::max_element(key_counts[i].begin(), key_counts[i].end());
      const int64_t unit = page ? page : 16;
      ServingCase c{p, q_lengths[i], key_counts[i], (longest + 2 * unit) / unit * unit};
      c.counts_from_offsets = page > 0 && n % 3 == 2;
      if (n % 4 == 1) c.config.splits = 3;
      cases.push_back(c);
      // The sm80 family (cp.async gathers) on every other case.
      if (n % 2 == 0) {
        c.config.path = KernelPath::sm80;
        cases.push_back(c);
      }
    }
  return cases;
}

class VarlenKvCacheCorrectness : public ::testing::TestWithParam<ServingCase> {};

TEST_P(VarlenKvCacheCorrectness, MatchesReferencePerSequence) {
  if (GetParam().config.path == KernelPath::sm80)
    FLASHJIT_REQUIRE_GPU();
  else
    FLASHJIT_REQUIRE_SM90();
  run_serving_case(GetParam(), 1818);
}

INSTANTIATE_TEST_SUITE_P(VarlenKvCache, VarlenKvCacheCorrectness,
                         ::testing::ValuesIn(serving_cases()),
                         [](const ::testing::TestParamInfo<ServingCase> &info) {
                           return "case" + std::to_string(info.index);
                         });

// The O of a call, as stored bits.
llvm::Expected<std::vector<uint16_t>> output_bits(const DeviceBuffer &o, size_t elements) {
  std::vector<uint16_t> bits(elements);
  if (auto e = o.download(bits.data(), elements * 2)) return e;
  return bits;
}

// One decode query per sequence through the serving call and through the
// dense KV-cache call (flashjit_forward_kvcache) on the same paged cache,
// and a prefill batch through the serving call and through the packed call
// without a cache on the keys gathered into packed rows: the same tiles
// (fixed config, no split) give the same bits.
TEST(VarlenKvCache, EqualsTheDenseCacheCallAndThePackedCall) {
  FLASHJIT_REQUIRE_SM90();
  const KernelConfig fixed{KernelPath::sm90, 128, 128, 12, 2, false, 1, GqaPacking::off};
  for (int page : {16, 64}) {
    SCOPED_TRACE(page);
    // Decode: against the dense cache call (seqlen_q = 1 per sequence).
    Problem p = make_problem(DType::bf16, 1, 32, 8, 1, 1, 128, 128, MaskKind::causal);
    p.page_size = page;
    const ServingCase decode{p, {1, 1, 1, 1}, {1000, 0, 2047, 300}, 2048};
    auto data = make_serving_data(decode, 5);
    FLASHJIT_ASSERT_OK(data.takeError());
    FLASHJIT_ASSERT_OK(launch_forward(data->problem, data->args, nullptr, fixed));
    auto serving = output_bits(data->dout, 4 * 32 * 128);
    FLASHJIT_ASSERT_OK(serving.takeError());
    Problem dense = data->problem;
    dense.varlen = false;
    dense.seqlen_q = 1;
    ForwardArgs args = data->args;
    args.varlen = {};
    args.q_strides.batch = 32 * 128;
    args.o_strides.batch = 32 * 128;
    args.lse = nullptr;
    auto o_dense = DeviceBuffer::allocate(4 * 32 * 128 * 2);
    FLASHJIT_ASSERT_OK(o_dense.takeError());
    args.o = o_dense->data();
    FLASHJIT_ASSERT_OK(launch_forward(dense, args, nullptr, fixed));
    auto dense_bits = output_bits(*o_dense, 4 * 32 * 128);
    FLASHJIT_ASSERT_OK(dense_bits.takeError());
    EXPECT_TRUE(*serving == *dense_bits) << "serving call != dense KV-cache call";

    // Prefill chunks: against the packed call over the gathered keys.
    p.mask = MaskKind::causal;
    const ServingCase prefill{p, {300, 17, 1, 129}, {1000, 17, 2047, 129}, 2048};
    auto pre = make_serving_data(prefill, 6);
    FLASHJIT_ASSERT_OK(pre.takeError());
    FLASHJIT_ASSERT_OK(launch_forward(pre->problem, pre->args, nullptr, fixed));
    const size_t o_elements = pre->total_q * 32 * 128;
    auto serving_pre = output_bits(pre->dout, o_elements);
    FLASHJIT_ASSERT_OK(serving_pre.takeError());
    std::vector<float> k_packed, v_packed;
    for (size_t b = 0; b < prefill.keys.size(); ++b) {
      const size_t row = 8 * 128;
      k_packed.insert(k_packed.end(), pre->k_log.begin() + b * 2048 * row,
                      pre->k_log.begin() + (b * 2048 + prefill.keys[b]) * row);
      v_packed.insert(v_packed.end(), pre->v_log.begin() + b * 2048 * row,
                      pre->v_log.begin() + (b * 2048 + prefill.keys[b]) * row);
    }
    auto dk = testing::upload_values(DType::bf16, k_packed);
    auto dv = testing::upload_values(DType::bf16, v_packed);
    auto o_packed = DeviceBuffer::allocate(o_elements * 2);
    for (auto *buffer : {&dk, &dv, &o_packed}) FLASHJIT_ASSERT_OK(buffer->takeError());
    Problem packed = pre->problem;
    packed.seqused_k = false;
    packed.page_size = 0;
    packed.seqlen_k = 2047;
    ForwardArgs pa = pre->args;
    pa.cache = {};
    pa.k = dk->data();
    pa.v = dv->data();
    pa.o = o_packed->data();
    pa.lse = nullptr;
    pa.k_strides = pa.v_strides = {0, 8 * 128, 128};
    pa.varlen.cu_seqlens_k = static_cast<const int32_t *>(pre->dcu_k.data());
    pa.varlen.total_k = static_cast<int64_t>(k_packed.size() / (8 * 128));
    FLASHJIT_ASSERT_OK(launch_forward(packed, pa, nullptr, fixed));
    auto packed_bits = output_bits(*o_packed, o_elements);
    FLASHJIT_ASSERT_OK(packed_bits.takeError());
    EXPECT_TRUE(*serving_pre == *packed_bits) << "serving call != packed call";
  }
}

// Small shapes for compute-sanitizer (memcheck, racecheck):
// --gtest_filter='Sm90Sanitizer*'. Invalid table entries past the keys,
// a sequence of no keys, split and packed GQA, both families.
TEST(Sm90SanitizerVarlenKvCache, PagedMixedBatch) {
  FLASHJIT_REQUIRE_SM90();
  Problem p = make_problem(DType::bf16, 1, 8, 2, 1, 1, 128, 128, MaskKind::causal);
  p.page_size = 16;
  run_serving_case({p, {1, 40, 0, 1}, {300, 90, 0, 0}, 320}, 71);
  ServingCase split{p, {1, 1, 1}, {300, 17, 0}, 320};
  split.config.splits = 3;
  run_serving_case(split, 72);
  p.page_size = 64;
  ServingCase sm80{p, {1, 40, 0, 1}, {300, 90, 0, 5}, 320};
  sm80.config.path = KernelPath::sm80;
  run_serving_case(sm80, 73);
}

}  // namespace
}  // namespace flashjit
