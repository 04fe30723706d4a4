// The forward over a KV cache (Problem::seqused_k, page_size): per-sequence
// key counts (0 and 1 included), contiguous and paged caches with shuffled
// page tables, this step's keys appended first, against a float64 reference
// computed sequence by sequence on the keys each one really has, with
// the accuracy criterion (reference/accuracy.h). Pages no sequence uses hold NaN (a read of one
// poisons the result); table entries past a sequence's keys hold indices
// outside the cache; outputs are poisoned before the run. A contiguous cache
// may be a pool of entries (cache_batch_idx: shuffled, spare entries of NaN,
// one index outside the pool) with left padding (cache_leftpad: the rows
// before it hold NaN).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "forward_check.h"
#include "generator/kernel_spec.h"

namespace flashjit {
namespace {

using testing::kNaNBits;
using testing::make_problem;
using testing::random_values;
using testing::upload_bits;

struct KvCase {
  Problem problem;                 // seqlen_k: the capacity per sequence
  std::vector<int> cached;         // cache_seqlens, per sequence
  int seqlen_new = 0;              // keys appended this step
  int splits = 0;                  // 0: the heuristic
  bool out_of_range_page = false;  // one used table entry points past the cache
  KernelPath path = KernelPath::sm90;
  std::vector<int> batch_idx = {};  // contiguous: each sequence's cache entry (empty: b)
  std::vector<int> leftpad = {};    // contiguous: each sequence's first row (empty: 0)
  std::string name() const {
    std::string s = describe(problem) + " cached=[";
    for (int c : cached) s += std::to_string(c) + ",";
    s += "] new=" + std::to_string(seqlen_new) + " splits=" + std::to_string(splits);
    if (out_of_range_page) s += " bad-page";
    if (!batch_idx.empty()) s += " batch-idx";
    if (!leftpad.empty()) s += " leftpad";
    s += std::string(" ") + to_string(path);
    return s;
  }
};

void run_kv_case(const KvCase &c, uint64_t seed) {
  SCOPED_TRACE(c.name());
  const Problem &p = c.problem;
  const int64_t b_n = p.batch, hkv = p.heads_kv, d = p.head_dim_qk, dv = p.head_dim_v;
  const int64_t cap = p.seqlen_k;
  const bool paged = p.page_size > 0;
  const int64_t page = paged ? p.page_size : cap;
  const int64_t width = cap / page;  // table entries per sequence
  const bool pool = !c.batch_idx.empty();
  const int64_t spare = paged || pool ? 3 : 0;  // pages (entries) no sequence uses
  const int64_t num_pages = paged ? b_n * width + spare : b_n + spare;
  auto entry = [&](int64_t b) -> int64_t { return pool ? c.batch_idx[b] : b; };
  auto has_entry = [&](int64_t b) { return entry(b) >= 0 && entry(b) < num_pages; };
  auto first_row = [&](int64_t b) -> int64_t { return c.leftpad.empty() ? 0 : c.leftpad[b]; };
  std::mt19937_64 rng(seed);

  // The logical keys of every sequence (all of its capacity), then the
  // appended ones written over positions cached[b]...
  std::vector<float> k_log = random_values(p.dtype, b_n * cap * hkv * d, seed + 1);
  std::vector<float> v_log = random_values(p.dtype, b_n * cap * hkv * dv, seed + 2);
  std::vector<float> k_new = random_values(p.dtype, b_n * c.seqlen_new * hkv * d, seed + 3);
  std::vector<float> v_new = random_values(p.dtype, b_n * c.seqlen_new * hkv * dv, seed + 4);
  std::vector<float> q = random_values(p.dtype, q_elements(p), seed + 5);

  // Shuffled pages; the spare ones hold NaN.
  std::vector<int> order(num_pages);
  std::iota(order.begin(), order.end(), 0);
  if (paged) std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> table(b_n * width);
  for (int64_t i = 0; i < b_n * width; ++i) table[i] = order[i];
  std::vector<uint16_t> k_cache(num_pages * page * hkv * d, kNaNBits);
  std::vector<uint16_t> v_cache(num_pages * page * hkv * dv, kNaNBits);
  auto slot = [&](int64_t b, int64_t n) {  // (page or batch, row) of key n of sequence b
    return paged ? std::pair<int64_t, int64_t>{table[b * width + n / page], n % page}
                 : std::pair<int64_t, int64_t>{entry(b), n};
  };
  for (int64_t b = 0; b < b_n; ++b)
    for (int64_t n = first_row(b); n < cap && has_entry(b); ++n) {
      auto [outer, row] = slot(b, n);
      for (int64_t h = 0; h < hkv; ++h) {
        for (int64_t x = 0; x < d; ++x)
          k_cache[((outer * page + row) * hkv + h) * d + x] =
              float_to_bits(p.dtype, k_log[((b * cap + n) * hkv + h) * d + x]);
        for (int64_t x = 0; x < dv; ++x)
          v_cache[((outer * page + row) * hkv + h) * dv + x] =
              float_to_bits(p.dtype, v_log[((b * cap + n) * hkv + h) * dv + x]);
      }
    }
  // What the kernel sees: the appended keys, clamped key counts, zeros for
  // a page index past the cache.
  std::vector<int> keys(b_n);
  for (int64_t b = 0; b < b_n; ++b) {
    keys[b] =
        has_entry(b) ? static_cast<int>(std::min<int64_t>(c.cached[b] + c.seqlen_new, cap)) : 0;
    for (int64_t i = 0; i < c.seqlen_new && c.cached[b] + i < cap; ++i)
      for (int64_t h = 0; h < hkv; ++h) {
        const int64_t n = c.cached[b] + i;
        for (int64_t x = 0; x < d; ++x)
          k_log[((b * cap + n) * hkv + h) * d + x] =
              k_new[((b * c.seqlen_new + i) * hkv + h) * d + x];
        for (int64_t x = 0; x < dv; ++x)
          v_log[((b * cap + n) * hkv + h) * dv + x] =
              v_new[((b * c.seqlen_new + i) * hkv + h) * dv + x];
      }
    // Entries past the sequence's keys are never read: make them invalid.
    if (paged)
      for (int64_t e = (keys[b] + page - 1) / page; e < width; ++e)
        table[b * width + e] = e % 2 ? -7 : static_cast<int32_t>(num_pages + 100);
  }
  if (c.out_of_range_page && paged && keys[0] > 0) {
    table[0] = static_cast<int32_t>(num_pages);  // read as zeros
    for (int64_t n = 0; n < std::min<int64_t>(page, keys[0]); ++n)
      for (int64_t h = 0; h < hkv; ++h) {
        for (int64_t x = 0; x < d; ++x) k_log[((0 * cap + n) * hkv + h) * d + x] = 0.f;
        for (int64_t x = 0; x < dv; ++x) v_log[((0 * cap + n) * hkv + h) * dv + x] = 0.f;
      }
  }

  auto dq = testing::upload_values(p.dtype, q);
  auto dk = upload_bits(k_cache);
  auto dv_buf = upload_bits(v_cache);
  auto dkn = testing::upload_values(p.dtype, k_new.empty() ? std::vector<float>(8) : k_new);
  auto dvn = testing::upload_values(p.dtype, v_new.empty() ? std::vector<float>(8) : v_new);
  auto dtable = DeviceBuffer::allocate(std::max<size_t>(table.size(), 1) * 4);
  auto dplace = DeviceBuffer::allocate(2 * b_n * 4);  // cache_batch_idx, cache_leftpad
  auto dlens = DeviceBuffer::allocate(b_n * 4);
  auto dout = DeviceBuffer::allocate(o_elements(p) * 2);
  auto dlse = DeviceBuffer::allocate(lse_elements(p) * 4);
  FLASHJIT_ASSERT_OK(dq.takeError());
  FLASHJIT_ASSERT_OK(dk.takeError());
  FLASHJIT_ASSERT_OK(dv_buf.takeError());
  FLASHJIT_ASSERT_OK(dkn.takeError());
  FLASHJIT_ASSERT_OK(dvn.takeError());
  FLASHJIT_ASSERT_OK(dtable.takeError());
  FLASHJIT_ASSERT_OK(dplace.takeError());
  FLASHJIT_ASSERT_OK(dlens.takeError());
  FLASHJIT_ASSERT_OK(dout.takeError());
  FLASHJIT_ASSERT_OK(dlse.takeError());
  FLASHJIT_ASSERT_OK(dtable->upload(table.data(), table.size() * 4));
  FLASHJIT_ASSERT_OK(dlens->upload(c.cached.data(), b_n * 4));
  FLASHJIT_ASSERT_OK(dout->fill_bytes(0xff));
  FLASHJIT_ASSERT_OK(dlse->fill_bytes(0xff));

  ForwardArgs args = ForwardArgs::packed(p, dq->data(), dk->data(), dv_buf->data(), dout->data(),
                                         static_cast<float *>(dlse->data()));
  // Paged: the strides step from page to page.
  args.k_strides = {page * hkv * d, hkv * d, d};
  args.v_strides = {page * hkv * dv, hkv * dv, dv};
  args.cache.cache_seqlens = static_cast<const int32_t *>(dlens->data());
  if (paged) {
    args.cache.page_table = static_cast<const int32_t *>(dtable->data());
    args.cache.page_table_stride = width;
    args.cache.num_pages = num_pages;
  }
  std::vector<int32_t> place(2 * b_n, 0);
  for (int64_t b = 0; b < b_n; ++b) {
    place[b] = static_cast<int32_t>(entry(b));
    place[b_n + b] = static_cast<int32_t>(first_row(b));
  }
  FLASHJIT_ASSERT_OK(dplace->upload(place.data(), place.size() * 4));
  if (pool) {
    args.cache.cache_batch_idx = static_cast<const int32_t *>(dplace->data());
    args.cache.cache_batches = num_pages;
  }
  if (!c.leftpad.empty())
    args.cache.cache_leftpad = static_cast<const int32_t *>(dplace->data()) + b_n;
  if (c.seqlen_new > 0) {
    args.cache.k_new = dkn->data();
    args.cache.v_new = dvn->data();
    args.cache.seqlen_new = c.seqlen_new;
    args.cache.k_new_strides = {c.seqlen_new * hkv * d, hkv * d, d};
    args.cache.v_new_strides = {c.seqlen_new * hkv * dv, hkv * dv, dv};
  }
  KernelConfig config;
  config.path = c.path;
  config.splits = c.splits;
  FLASHJIT_ASSERT_OK(launch_forward(p, args, nullptr, config));

  auto out = testing::download_values(p.dtype, *dout, o_elements(p));
  FLASHJIT_ASSERT_OK(out.takeError());
  std::vector<float> lse(lse_elements(p));
  FLASHJIT_ASSERT_OK(dlse->download(lse.data(), lse.size() * 4));

  // The appended keys are in the cache where the sequence's table says.
  if (c.seqlen_new > 0) {
    std::vector<uint16_t> k_after(k_cache.size());
    FLASHJIT_ASSERT_OK(dk->download(k_after.data(), k_after.size() * 2));
    int wrong = 0;
    for (int64_t b = 0; b < b_n; ++b)
      for (int64_t i = 0; i < c.seqlen_new && c.cached[b] + i < cap; ++i) {
        auto [outer, row] = slot(b, c.cached[b] + i);
        if (outer < 0 || outer >= num_pages) continue;
        for (int64_t h = 0; h < hkv; ++h)
          for (int64_t x = 0; x < d; ++x)
            wrong += k_after[((outer * page + row) * hkv + h) * d + x] !=
                     float_to_bits(p.dtype, k_new[((b * c.seqlen_new + i) * hkv + h) * d + x]);
      }
    EXPECT_EQ(wrong, 0) << "appended keys missing from the cache";
  }

  // The reference, one sequence at a time on the keys it has.
  AttentionOutputs exact, element;
  exact.out.assign(o_elements(p), 0.f);
  element.out.assign(o_elements(p), 0.f);
  exact.lse.assign(lse_elements(p), INFINITY);
  element.lse = exact.lse;
  const int64_t q_row = p.seqlen_q * p.heads_q * d, o_row = p.seqlen_q * p.heads_q * dv;
  const int64_t lse_row = p.heads_q * p.seqlen_q;
  for (int64_t b = 0; b < b_n; ++b) {
    const int64_t start = std::min<int64_t>(first_row(b), keys[b]);
    if (keys[b] == start) continue;  // no key: O = 0, LSE = +inf
    Problem one = p;
    one.batch = 1;
    one.seqlen_k = keys[b] - start;
    one.seqused_k = false;
    one.page_size = 0;
    std::vector<float> qb(q.begin() + b * q_row, q.begin() + (b + 1) * q_row);
    std::vector<float> kb(k_log.begin() + (b * cap + start) * hkv * d,
                          k_log.begin() + (b * cap + keys[b]) * hkv * d);
    std::vector<float> vb(v_log.begin() + (b * cap + start) * hkv * dv,
                          v_log.begin() + (b * cap + keys[b]) * hkv * dv);
    AttentionOutputs e = cpu_attention(one, qb, kb, vb, ReferencePrecision::exact);
    AttentionOutputs m = cpu_attention(one, qb, kb, vb, ReferencePrecision::element);
    std::copy(e.out.begin(), e.out.end(), exact.out.begin() + b * o_row);
    std::copy(m.out.begin(), m.out.end(), element.out.begin() + b * o_row);
    std::copy(e.lse.begin(), e.lse.end(), exact.lse.begin() + b * lse_row);
  }
  AccuracyReport report = check_forward_accuracy(*out, exact.out, element.out, lse, exact.lse);
  EXPECT_TRUE(report.passed) << report.describe();
}

std::vector<KvCase> kv_cases() {
  std::vector<KvCase> cases;
  std::mt19937 rng(2026);
  auto lengths = [&](int64_t batch, int64_t cap, int n) {
    std::vector<int> out(batch);
    for (int64_t b = 0; b < batch; ++b) out[b] = static_cast<int>(rng() % (cap + 1));
    // 0 and 1 keys in some, the whole capacity in others.
    if (batch > 1 && n % 2 == 0) out[0] = 0;
    if (batch > 2) out[1] = 1;
    if (batch > 3) out[2] = static_cast<int>(cap);
    return out;
  };
  const int pages[] = {0, 16, 64, 128, 256};
  const int64_t queries[] = {1, 1, 4, 16, 128};
  const std::pair<int64_t, int64_t> heads[] = {{8, 8}, {16, 4}, {16, 2}, {32, 2}, {8, 1}};
  int n = 0;
  for (int page : pages)
    for (int64_t sq : queries) {
      const auto [hq, hkv] = heads[n % 5];
      const int d = (int[]){128, 64, 256}[n % 3];
      const DType dtype = n % 2 ? DType::fp16 : DType::bf16;
      const MaskKind mask = (MaskKind[]){MaskKind::none, MaskKind::causal, MaskKind::window}[n % 3];
      int64_t cap = page ? page * (1 + n % 7) * (page < 64 ? 8 : 2) : 200 + 97 * n;
      // The float64 reference's work: at most about 4e8 multiply-adds.
      const int64_t budget = int64_t(4e8) / (4 * hq * sq * d);
      if (cap > budget) cap = page ? std::max<int64_t>(page, budget / page * page) : budget;
      Problem p =
          make_problem(dtype, 4, hq, hkv, sq, cap, d, d, mask, mask == MaskKind::window ? 90 : -1,
                       mask == MaskKind::window ? 3 : -1, n % 4 == 3 ? 20.f : 0.f);
      p.seqused_k = true;
      p.page_size = page;
      KvCase c{p, lengths(4, cap, n)};
      c.seqlen_new = (int[]){0, 1, 3}[n % 3];
      // An explicit split count must not exceed the key tiles (128 keys at most).
      c.splits = n % 4 == 1 ? 1 : n % 4 == 2 && cap >= 3 * 128 ? 3 : 0;
      c.out_of_range_page = page > 0 && n % 5 == 2;
      cases.push_back(c);
      // The sm80 family (cp.async gathers of page pieces) on every other case.
      if (n % 2 == 0) {
        c.path = KernelPath::sm80;
        cases.push_back(c);
      }
      ++n;
    }
  // Past head dim 256 (two consumer warpgroups per 64 rows), contiguous and
  // paged, appending: Gemma 4's 8/4 heads at 512, MLA's 576/512 over one KV
  // head.
  for (int page : {0, 64}) {
    const int64_t cap = page ? page * 12 : 700;
    Problem p = make_problem(DType::bf16, 3, 8, 4, 1, cap, 512, 512, MaskKind::none);
    p.seqused_k = true;
    p.page_size = page;
    KvCase c{p, lengths(3, cap, 0)};
    c.seqlen_new = 1;
    cases.push_back(c);
    Problem mla = make_problem(DType::bf16, 2, 16, 1, 2, cap, 576, 512, MaskKind::causal);
    mla.seqused_k = true;
    mla.page_size = page;
    cases.push_back(KvCase{mla, lengths(2, cap, 1)});
  }
  // Pages that are not whole 16-row runs (SGLang's 1, FlashAttention-3's 4,
  // odd ones): the sm80 family's row gather, shuffled tables, bad entries.
  for (int page : {1, 3, 8, 24, 40}) {
    const int64_t cap = page * (page < 8 ? 150 : 30);
    const MaskKind mask = page % 2 ? MaskKind::causal : MaskKind::none;
    Problem p = make_problem(page == 8 ? DType::fp16 : DType::bf16, 4, 16, 4,
                             page == 24 ? 5 : 1, cap, page == 40 ? 64 : 128,
                             page == 40 ? 64 : 128, mask);
    p.seqused_k = true;
    p.page_size = page;
    KvCase c{p, lengths(4, cap - 2, page)};
    c.seqlen_new = page % 3 == 0 ? 2 : 1;
    c.splits = page == 24 ? 3 : 0;
    c.out_of_range_page = page != 3;
    c.path = KernelPath::sm80;
    cases.push_back(c);
  }
  // A pool of contiguous entries (cache_batch_idx, one index outside it) and
  // left padding, together and alone, both families, appending or not.
  for (int n = 0; n < 8; ++n) {
    const auto [hq, hkv] = heads[n % 5];
    const MaskKind mask = (MaskKind[]){MaskKind::causal, MaskKind::none, MaskKind::window}[n % 3];
    const int64_t cap = 300 + 131 * n, sq = (int64_t[]){1, 3, 16, 1}[n % 4];
    Problem p = make_problem(n % 2 ? DType::fp16 : DType::bf16, 4, hq, hkv, sq, cap,
                             (int[]){128, 64}[n % 2], (int[]){128, 64}[n % 2], mask,
                             mask == MaskKind::window ? 70 : -1, mask == MaskKind::window ? 0 : -1);
    p.seqused_k = true;
    KvCase c{p, lengths(4, cap - 3, n)};
    c.seqlen_new = (int[]){1, 0, 3}[n % 3];
    c.splits = n % 4 == 2 && cap >= 3 * 128 ? 3 : 0;
    if (n % 4 != 3) c.batch_idx = {5, 2, n % 2 ? -1 : 0, 6};  // of 4 + 3 entries
    if (n % 4 != 0)
      for (int b = 0; b < 4; ++b) c.leftpad.push_back(static_cast<int>(rng() % (c.cached[b] + 2)));
    c.path = n < 6 ? KernelPath::sm90 : KernelPath::sm80;
    cases.push_back(c);
  }
  return cases;
}

class KvCacheCorrectness : public ::testing::TestWithParam<KvCase> {};

TEST_P(KvCacheCorrectness, MatchesReferencePerSequence) {
  if (GetParam().path == KernelPath::sm90)
    FLASHJIT_REQUIRE_SM90();
  else
    FLASHJIT_REQUIRE_GPU();
  run_kv_case(GetParam(), 4242);
}

INSTANTIATE_TEST_SUITE_P(KvCache, KvCacheCorrectness, ::testing::ValuesIn(kv_cases()),
                         [](const ::testing::TestParamInfo<KvCase> &info) {
                           return "case" + std::to_string(info.index);
                         });

// A Llama-3-8B decode step over a long cache, contiguous and paged, with
// sequences of very different lengths and one appended key.
TEST(KvCache, LlamaDecodeContiguousAndPaged) {
  FLASHJIT_REQUIRE_SM90();
  for (int page : {0, 64}) {
    Problem p = make_problem(DType::bf16, 3, 32, 8, 1, 4096, 128, 128, MaskKind::none);
    p.seqused_k = true;
    p.page_size = page;
    run_kv_case({p, {4096, 1000, 3}, 1, 0}, 99);
  }
}

// Small paged shapes for compute-sanitizer (memcheck, racecheck):
// --gtest_filter='Sm90Sanitizer*'. Table entries past the keys point outside
// the cache, one used entry too (read as zeros), keys are appended.
TEST(Sm90SanitizerKvCache, PagedAppendAndBadPages) {
  FLASHJIT_REQUIRE_SM90();
  Problem p = make_problem(DType::bf16, 3, 8, 2, 2, 256, 128, 128, MaskKind::causal);
  p.seqused_k = true;
  p.page_size = 16;
  run_kv_case({p, {0, 100, 250}, 2, 2, true}, 61);  // two key tiles at page 16's block_n 128
  p.page_size = 64;
  p.head_dim_qk = p.head_dim_v = 64;
  run_kv_case({p, {1, 64, 200}, 1, 0, true}, 62);
  p.page_size = 0;
  run_kv_case({p, {5, 0, 256}, 1, 2}, 63);
  // The sm80 family's gathers, split, a page index past the cache.
  p.page_size = 16;
  KvCase sm80{p, {0, 100, 250}, 2, 2, true};  // 256 keys: two tiles of sm80's 128
  sm80.path = KernelPath::sm80;
  run_kv_case(sm80, 64);
}

}  // namespace
}  // namespace flashjit
