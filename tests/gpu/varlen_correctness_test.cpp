// The forward over a packed batch of sequences of different lengths
// (Problem::varlen, flash_attn_varlen_func): lengths 0, 1, 17, 113, 1023 and
// more mixed in one batch, seqlen_q != seqlen_k per sequence, masks aligned
// bottom-right per sequence, GQA (packed where the heuristic packs), split-KV,
// both dtypes and families, against a float64 reference computed sequence
// by sequence with the accuracy criterion (reference/accuracy.h). Outputs are poisoned before the
// run; the LSE is [heads_q, total_q]. Offsets the host cannot check (past
// the tensors, decreasing) are clamped on the device, and the reference
// applies the same clamp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "flashjit/backward.h"
#include "generator/forward_params.h"
#include "forward_check.h"
#include "reference/cpu_attention_backward.h"
#include "reference/packed_check.h"
#include "runtime/launch_backward.h"

namespace flashjit {
namespace {

using testing::make_problem;
using testing::random_values;

struct VarlenCase {
  Problem problem;            // batch, heads, dims, mask; lengths come from below
  std::vector<int> lens_q;    // per sequence
  std::vector<int> lens_k;
  int splits = 0;             // 0: the heuristic
  KernelPath path = KernelPath::sm90;
  // Device offsets as given (empty: the prefix sums of the lengths); the
  // kernel clamps them to the tensors.
  std::vector<int32_t> cu_q = {}, cu_k = {};
  std::string name() const {
    std::string s = describe(problem) + " q=[";
    for (int l : lens_q) s += std::to_string(l) + ",";
    s += "] k=[";
    for (int l : lens_k) s += std::to_string(l) + ",";
    s += "] splits=" + std::to_string(splits) + " " + to_string(path);
    return s;
  }
};

std::vector<int32_t> prefix_sums(const std::vector<int> &lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  return cu;
}

// Int32 offsets in a new device buffer.
llvm::Expected<DeviceBuffer> upload_offsets(const std::vector<int32_t> &cu) {
  auto buffer = DeviceBuffer::allocate(cu.size() * sizeof(int32_t));
  if (!buffer) return buffer.takeError();
  if (auto e = buffer->upload(cu.data(), cu.size() * sizeof(int32_t))) return e;
  return std::move(*buffer);
}

// `p` as the packed batch of sequences of lengths lens_q / lens_k: batch
// their count, seqlen_q / seqlen_k the longest (at least 1).
Problem packed_problem(Problem p, const std::vector<int> &lens_q, const std::vector<int> &lens_k) {
  p.varlen = true;
  p.batch = static_cast<int64_t>(lens_q.size());
  p.seqlen_q = std::max<int64_t>(1, *std::max_element(lens_q.begin(), lens_q.end()));
  p.seqlen_k = std::max<int64_t>(1, *std::max_element(lens_k.begin(), lens_k.end()));
  return p;
}

// Sequence b's (first row, length) as the kernel reads them
// (common/sequence.cuh): offsets clamped to [0, total], lengths to the
// maximum.
std::pair<int64_t, int64_t> clamped(const std::vector<int32_t> &cu, size_t b, int64_t total,
                                    int64_t longest) {
  const int64_t start = std::clamp<int64_t>(cu[b], 0, total);
  const int64_t end = std::clamp<int64_t>(cu[b + 1], start, total);
  return {start, std::min(end - start, longest)};
}

void run_varlen_case(const VarlenCase &c, uint64_t seed) {
  SCOPED_TRACE(c.name());
  const Problem p = packed_problem(c.problem, c.lens_q, c.lens_k);
  const int64_t batch = p.batch;
  const int64_t hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim_qk, dv = p.head_dim_v;
  const std::vector<int32_t> cu_q = c.cu_q.empty() ? prefix_sums(c.lens_q) : c.cu_q;
  const std::vector<int32_t> cu_k = c.cu_k.empty() ? prefix_sums(c.lens_k) : c.cu_k;
  const int64_t total_q = std::accumulate(c.lens_q.begin(), c.lens_q.end(), int64_t(0));
  const int64_t total_k = std::accumulate(c.lens_k.begin(), c.lens_k.end(), int64_t(0));

  const std::vector<float> q = random_values(p.dtype, std::max<int64_t>(total_q, 1) * hq * d, seed);
  const std::vector<float> k =
      random_values(p.dtype, std::max<int64_t>(total_k, 1) * hkv * d, seed + 1);
  const std::vector<float> v =
      random_values(p.dtype, std::max<int64_t>(total_k, 1) * hkv * dv, seed + 2);
  auto dq = testing::upload_values(p.dtype, q);
  auto dk = testing::upload_values(p.dtype, k);
  auto dv_buf = testing::upload_values(p.dtype, v);
  auto dout = DeviceBuffer::allocate(std::max<int64_t>(total_q, 1) * hq * dv * 2);
  auto dlse = DeviceBuffer::allocate(std::max<int64_t>(total_q, 1) * hq * 4);
  auto dcu_q = upload_offsets(cu_q);
  auto dcu_k = upload_offsets(cu_k);
  for (auto *buffer : {&dq, &dk, &dv_buf, &dout, &dlse, &dcu_q, &dcu_k})
    FLASHJIT_ASSERT_OK(buffer->takeError());
  FLASHJIT_ASSERT_OK(dout->fill_bytes(0xff));
  FLASHJIT_ASSERT_OK(dlse->fill_bytes(0xff));

  ForwardArgs args;
  args.q = dq->data();
  args.k = dk->data();
  args.v = dv_buf->data();
  args.o = dout->data();
  args.lse = static_cast<float *>(dlse->data());
  args.q_strides = {0, hq * d, d};
  args.k_strides = {0, hkv * d, d};
  args.v_strides = {0, hkv * dv, dv};
  args.o_strides = {0, hq * dv, dv};
  args.varlen.cu_seqlens_q = static_cast<const int32_t *>(dcu_q->data());
  args.varlen.cu_seqlens_k = static_cast<const int32_t *>(dcu_k->data());
  args.varlen.total_q = total_q;
  args.varlen.total_k = total_k;
  KernelConfig config;
  config.path = c.path;
  config.splits = c.splits;
  FLASHJIT_ASSERT_OK(launch_forward(p, args, nullptr, config));
  if (total_q == 0) return;  // nothing to compare

  auto out = testing::download_values(p.dtype, *dout, total_q * hq * dv);
  FLASHJIT_ASSERT_OK(out.takeError());
  std::vector<float> lse(total_q * hq);
  FLASHJIT_ASSERT_OK(dlse->download(lse.data(), lse.size() * 4));

  // The reference, one sequence at a time, in the packed layouts; only the
  // rows some sequence owns are compared.
  std::vector<float> got_out, got_lse, exact_out, element_out, exact_lse;
  for (int64_t b = 0; b < batch; ++b) {
    const auto [q0, lq] = clamped(cu_q, b, total_q, p.seqlen_q);
    const auto [k0, lk] = clamped(cu_k, b, total_k, p.seqlen_k);
    if (lq == 0) continue;
    AttentionOutputs e, m;
    if (lk == 0) {  // no key: O = 0, LSE = +inf
      e.out.assign(lq * hq * dv, 0.f);
      e.lse.assign(hq * lq, INFINITY);
      m = e;
    } else {
      Problem one = p;
      one.varlen = false;
      one.batch = 1;
      one.seqlen_q = lq;
      one.seqlen_k = lk;
      const std::vector<float> qb(q.begin() + q0 * hq * d, q.begin() + (q0 + lq) * hq * d);
      const std::vector<float> kb(k.begin() + k0 * hkv * d, k.begin() + (k0 + lk) * hkv * d);
      const std::vector<float> vb(v.begin() + k0 * hkv * dv, v.begin() + (k0 + lk) * hkv * dv);
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
  AccuracyReport report = check_forward_accuracy(got_out, exact_out, element_out, got_lse,
                                                 exact_lse);
  EXPECT_TRUE(report.passed) << report.describe();
}

std::vector<VarlenCase> varlen_cases() {
  std::vector<VarlenCase> cases;
  // Lengths 0, 1, 17, 113, 1023 and 4096 among them; the float64 reference's
  // work (sum of lq * lk, times heads and d) stays below ~3e8 a case.
  const std::vector<std::vector<int>> q_lengths = {
      {0, 1, 17, 113, 1023, 300}, {1500, 17, 0, 1}, {128, 128, 128, 128}, {1, 1, 1, 1, 1, 1, 1, 1},
      {513, 77, 0, 256}, {3, 2000, 5}};
  const std::vector<std::vector<int>> k_lengths = {
      {5, 1, 17, 60, 100, 300}, {90, 40, 7, 4096}, {128, 128, 128, 128},
      {1000, 3000, 17, 1, 0, 64, 128, 4000}, {200, 77, 9, 100}, {300, 40, 4000}};
  const std::pair<int64_t, int64_t> heads[] = {{4, 4}, {8, 2}, {4, 1}, {16, 4}, {6, 3}, {8, 8}};
  int n = 0;
  for (size_t i = 0; i < q_lengths.size(); ++i)
    for (int variant = 0; variant < 3; ++variant, ++n) {
      const auto [hq, hkv] = heads[(i + variant) % 6];
      const int d = (int[]){128, 64, 256}[n % 3];
      const DType dtype = n % 2 ? DType::fp16 : DType::bf16;
      const MaskKind mask = (MaskKind[]){MaskKind::none, MaskKind::causal, MaskKind::window}[
          (i + variant) % 3];
      Problem p = make_problem(dtype, 1, hq, hkv, 1, 1, d, d, mask,
                               mask == MaskKind::window ? 100 : -1,
                               mask == MaskKind::window ? 7 : -1, n % 4 == 3 ? 30.f : 0.f);
      VarlenCase c{p, q_lengths[i], k_lengths[i]};
      c.splits = n % 5 == 4 ? 3 : 0;
      cases.push_back(c);
      // The sm80 family on every other case, at its head dims (96 too).
      if (n % 2 == 0) {
        c.path = KernelPath::sm80;
        if (d == 256) c.problem.head_dim_qk = c.problem.head_dim_v = 96;
        cases.push_back(c);
      }
    }
  // The sm90 family at head dims between 64, 128 and 256 (tiled as the next).
  for (auto [d, mask] : {std::pair{80, MaskKind::causal}, {40, MaskKind::none}}) {
    const Problem p = make_problem(DType::bf16, 1, 8, 2, 1, 1, d, d, mask);
    cases.push_back({p, q_lengths[0], k_lengths[0]});
  }
  // Past head dim 256 (two consumer warpgroups per 64 rows).
  cases.push_back({make_problem(DType::bf16, 1, 4, 2, 1, 1, 512, 512, MaskKind::causal),
                   q_lengths[2], k_lengths[2]});
  cases.push_back({make_problem(DType::fp16, 1, 4, 4, 1, 1, 576, 512, MaskKind::none),
                   q_lengths[4], k_lengths[4]});
  return cases;
}

class VarlenCorrectness : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(VarlenCorrectness, MatchesReferencePerSequence) {
  if (GetParam().path == KernelPath::sm90)
    FLASHJIT_REQUIRE_SM90();
  else
    FLASHJIT_REQUIRE_GPU();
  run_varlen_case(GetParam(), 777);
}

INSTANTIATE_TEST_SUITE_P(Varlen, VarlenCorrectness, ::testing::ValuesIn(varlen_cases()),
                         [](const ::testing::TestParamInfo<VarlenCase> &info) {
                           return "case" + std::to_string(info.index);
                         });

// A packed batch of equal lengths equals the dense kernel's batch, bit for
// bit (same tiles, same order of accumulation).
TEST(Varlen, EqualLengthsMatchTheDenseKernelBitForBit) {
  FLASHJIT_REQUIRE_SM90();
  for (MaskKind mask : {MaskKind::none, MaskKind::causal}) {
    const Problem dense = make_problem(DType::bf16, 3, 8, 2, 300, 500, 128, 128, mask);
    const std::vector<float> q = random_values(dense.dtype, q_elements(dense), 5);
    const std::vector<float> k = random_values(dense.dtype, k_elements(dense), 6);
    const std::vector<float> v = random_values(dense.dtype, v_elements(dense), 7);
    auto dq = testing::upload_values(dense.dtype, q);
    auto dk = testing::upload_values(dense.dtype, k);
    auto dv = testing::upload_values(dense.dtype, v);
    auto o_dense = DeviceBuffer::allocate(o_elements(dense) * 2);
    auto o_packed = DeviceBuffer::allocate(o_elements(dense) * 2);
    auto dcu_q = upload_offsets({0, 300, 600, 900});
    auto dcu_k = upload_offsets({0, 500, 1000, 1500});
    for (auto *buffer : {&dq, &dk, &dv, &o_dense, &o_packed, &dcu_q, &dcu_k})
      FLASHJIT_ASSERT_OK(buffer->takeError());
    KernelConfig config;
    config.splits = 1;
    const ForwardArgs dense_args =
        ForwardArgs::packed(dense, dq->data(), dk->data(), dv->data(), o_dense->data(), nullptr);
    FLASHJIT_ASSERT_OK(launch_forward(dense, dense_args, nullptr, config));
    Problem packed = dense;
    packed.varlen = true;
    ForwardArgs args = dense_args;
    args.o = o_packed->data();
    args.q_strides.batch = args.k_strides.batch = args.v_strides.batch = args.o_strides.batch = 0;
    args.varlen = {static_cast<const int32_t *>(dcu_q->data()),
                   static_cast<const int32_t *>(dcu_k->data()), 900, 1500};
    FLASHJIT_ASSERT_OK(launch_forward(packed, args, nullptr, config));
    std::vector<uint16_t> a(o_elements(dense)), b(o_elements(dense));
    FLASHJIT_ASSERT_OK(o_dense->download(a.data(), a.size() * 2));
    FLASHJIT_ASSERT_OK(o_packed->download(b.data(), b.size() * 2));
    EXPECT_TRUE(a == b) << to_string(mask);
  }
}

// The backward of a packed batch: O and the LSE from the float64 forward of
// each sequence (O in element precision, as a kernel writes it), random dO;
// dq, dk, dv and the workspace poisoned; the gradients against float64 ones
// computed sequence by sequence, with the gradient criterion (reference/accuracy.h). A
// sequence without keys gets dq = 0, keys no query sees dk = dv = 0.
struct VarlenBackwardCase {
  Problem problem;
  std::vector<int> lens_q, lens_k;
  KernelConfig config = {};
};

void run_varlen_backward_case(const VarlenBackwardCase &c, uint64_t seed) {
  const Problem p = packed_problem(c.problem, c.lens_q, c.lens_k);
  SCOPED_TRACE(describe(p) + " " + describe(c.config));
  const int64_t hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim_qk, dv = p.head_dim_v;
  const std::vector<int32_t> cu_q = prefix_sums(c.lens_q), cu_k = prefix_sums(c.lens_k);
  const int64_t tq = cu_q.back(), tk = cu_k.back();
  const std::vector<float> q = random_values(p.dtype, tq * hq * d, seed);
  const std::vector<float> k = random_values(p.dtype, tk * hkv * d, seed + 1);
  const std::vector<float> v = random_values(p.dtype, tk * hkv * dv, seed + 2);
  const std::vector<float> dout = random_values(p.dtype, tq * hq * dv, seed + 3);

  // Per sequence: the forward's O and LSE, and the exact and element
  // gradients, into the packed layouts.
  PackedBatch lengths;
  lengths.seqlens_q.assign(c.lens_q.begin(), c.lens_q.end());
  lengths.seqlens_k.assign(c.lens_k.begin(), c.lens_k.end());
  const PackedReferenceGradients ref = packed_reference_gradients(p, lengths, q, k, v, dout);
  const std::vector<float> &o = ref.o, &lse = ref.lse;
  const AttentionGradients &exact = ref.exact, &element = ref.element;

  auto up = [&](const std::vector<float> &x) { return testing::upload_values(p.dtype, x); };
  auto dq_buf = up(q), dk_buf = up(k), dv_buf = up(v), do_buf = up(dout), o_buf = up(o);
  auto dq_out = DeviceBuffer::allocate(tq * hq * d * 2);
  auto dk_out = DeviceBuffer::allocate(tk * hkv * d * 2);
  auto dv_out = DeviceBuffer::allocate(tk * hkv * dv * 2);
  auto lse_buf = DeviceBuffer::allocate(lse.size() * 4);
  const size_t ws_bytes = backward_workspace_bytes(p, tq);
  auto ws = DeviceBuffer::allocate(ws_bytes);
  auto dcu_q = upload_offsets(cu_q);
  auto dcu_k = upload_offsets(cu_k);
  for (auto *buffer : {&dq_buf, &dk_buf, &dv_buf, &do_buf, &o_buf, &dq_out, &dk_out, &dv_out,
                       &lse_buf, &ws, &dcu_q, &dcu_k})
    FLASHJIT_ASSERT_OK(buffer->takeError());
  FLASHJIT_ASSERT_OK(lse_buf->upload(lse.data(), lse.size() * 4));
  for (auto *buffer : {&dq_out, &dk_out, &dv_out, &ws})
    FLASHJIT_ASSERT_OK((*buffer)->fill_bytes(0xff));

  BackwardArgs a;
  a.q = dq_buf->data();
  a.k = dk_buf->data();
  a.v = dv_buf->data();
  a.o = o_buf->data();
  a.dout = do_buf->data();
  a.lse = static_cast<const float *>(lse_buf->data());
  a.dq = dq_out->data();
  a.dk = dk_out->data();
  a.dv = dv_out->data();
  a.q_strides = a.dq_strides = {0, hq * d, d};
  a.k_strides = a.dk_strides = {0, hkv * d, d};
  a.v_strides = a.dv_strides = {0, hkv * dv, dv};
  a.o_strides = a.dout_strides = {0, hq * dv, dv};
  a.workspace = ws->data();
  a.workspace_bytes = ws_bytes;
  a.varlen = {static_cast<const int32_t *>(dcu_q->data()),
              static_cast<const int32_t *>(dcu_k->data()), tq, tk};
  FLASHJIT_ASSERT_OK(launch_backward(p, a, nullptr, c.config));

  AttentionGradients got;
  auto gq = testing::download_values(p.dtype, *dq_out, tq * hq * d);
  auto gk = testing::download_values(p.dtype, *dk_out, tk * hkv * d);
  auto gv = testing::download_values(p.dtype, *dv_out, tk * hkv * dv);
  FLASHJIT_ASSERT_OK(gq.takeError());
  FLASHJIT_ASSERT_OK(gk.takeError());
  FLASHJIT_ASSERT_OK(gv.takeError());
  got.dq = std::move(*gq);
  got.dk = std::move(*gk);
  got.dv = std::move(*gv);
  const GradientAccuracyReport report = check_gradient_accuracy(got, exact, element);
  EXPECT_TRUE(report.passed()) << report.describe();
}

TEST(VarlenBackward, MatchesReferencePerSequence) {
  FLASHJIT_REQUIRE_SM90();
  const std::vector<int> lq = {0, 1, 17, 113, 300, 64}, lk = {5, 1, 17, 200, 300, 0};
  struct Variant {
    int d;
    DType dtype;
    MaskKind mask;
    std::pair<int64_t, int64_t> heads;
    float softcap;
    KernelConfig config;
  };
  const Variant variants[] = {
      {128, DType::bf16, MaskKind::causal, {8, 2}, 0.f, {}},
      {64, DType::fp16, MaskKind::none, {4, 4}, 0.f, {}},
      {256, DType::bf16, MaskKind::window, {4, 1}, 0.f, {}},
      {128, DType::fp16, MaskKind::causal, {6, 3}, 25.f, {}},
      {96, DType::bf16, MaskKind::none, {4, 2}, 0.f, {}},  // the sm80 family
      {128, DType::bf16, MaskKind::causal, {4, 2}, 0.f,
       {KernelPath::automatic, 0, 0, 0, 0, /*deterministic=*/true}},
      {128, DType::bf16, MaskKind::none, {4, 2}, 0.f, {KernelPath::sm80, 64, 128, 8, 2}},
      // Deterministic without GQA under a mask (too few work items for
      // shortest first: BwdSm90Traits::dispatch_order).
      {256, DType::bf16, MaskKind::causal, {4, 4}, 0.f,
       {KernelPath::automatic, 0, 0, 0, 0, /*deterministic=*/true}},
      {64, DType::fp16, MaskKind::window, {4, 4}, 0.f,
       {KernelPath::automatic, 0, 0, 0, 0, /*deterministic=*/true}},
  };
  uint64_t seed = 900;
  for (const Variant &v : variants) {
    Problem p = make_problem(v.dtype, 1, v.heads.first, v.heads.second, 1, 1, v.d, v.d, v.mask,
                             v.mask == MaskKind::window ? 60 : -1,
                             v.mask == MaskKind::window ? 5 : -1, v.softcap);
    run_varlen_backward_case({p, lq, lk, v.config}, seed++);
  }
  // DeepSeek-V3's 192/128 (128 keys a CTA, S^T and dP^T in two passes),
  // causal, in both modes.
  for (bool deterministic : {false, true}) {
    Problem p = make_problem(DType::bf16, 1, 4, 2, 1, 1, 192, 128, MaskKind::causal);
    KernelConfig config;
    config.deterministic = deterministic;
    run_varlen_backward_case({p, lq, lk, config}, seed++);
  }
}

// Small shapes for compute-sanitizer (memcheck, racecheck):
// --gtest_filter='Sm90Sanitizer*'. Offsets past the tensors and decreasing
// ones are clamped; a sequence of no keys; split and packed GQA.
TEST(Sm90SanitizerVarlen, ClampedOffsetsSplitsAndPacking) {
  FLASHJIT_REQUIRE_SM90();
  Problem p = make_problem(DType::bf16, 1, 8, 2, 1, 1, 128, 128, MaskKind::causal);
  VarlenCase bad{p, {17, 23, 0}, {30, 0, 10}};
  bad.cu_q = {0, 17, 9999, 40};   // sequence 1 runs to the end; 2 is empty
  bad.cu_k = {0, 30, 5, 40};      // sequence 1 has no key
  run_varlen_case(bad, 31);
  VarlenCase decode{p, {1, 1, 1}, {700, 0, 300}, 4};
  run_varlen_case(decode, 32);
  VarlenCase sm80 = bad;
  sm80.path = KernelPath::sm80;
  run_varlen_case(sm80, 33);
}

// Enough work tiles for persistent CTAs, so the tiles are numbered without
// the empty ones (common/fwd_scheduler.cuh): without a mask dealt by the
// rotation, under one taken from the counter; clamped offsets past the
// tensor too.
TEST(Sm90SanitizerVarlen, PersistentCtasTakeTilesFromTheCounter) {
  FLASHJIT_REQUIRE_SM90();
  Problem p = make_problem(DType::bf16, 1, 8, 2, 1, 1, 128, 128, MaskKind::none);
  run_varlen_case({p, {300, 0, 1100, 17, 700}, {257, 40, 1100, 0, 900}}, 36);
  // Causal: persistent from (query blocks - 1) x SMs work tiles on (9 - 1) x 132.
  p = make_problem(DType::bf16, 1, 32, 8, 1, 1, 128, 128, MaskKind::causal);
  run_varlen_case({p, {300, 0, 1100, 17, 700}, {257, 40, 1100, 0, 900}}, 34);
  VarlenCase bad{p, {300, 0, 1100, 17, 700}, {257, 40, 1100, 0, 900}};
  bad.cu_q = {0, 300, 300, 1400, 99999, 2117};
  run_varlen_case(bad, 35);
}

// The persistent CTAs' order of a packed batch's sequences
// (fwd_sequence_order.cuh): the heaviest work tile first (its key tiles),
// then more query blocks, then the batch's own order; a sequence without
// queries last. The kernel also zeroes the tile counter.
TEST(Varlen, PersistentCtasTakeTheHeaviestSequencesFirst) {
  FLASHJIT_REQUIRE_SM90();
  struct Case {
    MaskKind mask;
    std::vector<int32_t> cu_q, cu_k;
    std::vector<int32_t> order;
  };
  const Case cases[] = {
      // keys 257, 40, 1100, 0, 900 under queries 300, 0, 1100, 17, 700.
      {MaskKind::none, {0, 300, 300, 1400, 1417, 2117}, {0, 257, 297, 1397, 1397, 2297},
       {2, 4, 0, 3, 1}},
      // Causal, bottom-right (the last query block sees every key): keys
      // 600, 300, 1100, 300 under queries 300 each but 1100; equal
      // sequences keep their order (1 before 3).
      {MaskKind::causal, {0, 300, 600, 1700, 2000}, {0, 600, 900, 2000, 2300}, {2, 0, 1, 3}},
  };
  for (const Case &c : cases) {
    const int64_t batch = static_cast<int64_t>(c.cu_q.size()) - 1;
    Problem p = make_problem(DType::bf16, batch, 8, 2, 1100, 1100, 128, 128, c.mask);
    p.varlen = true;
    auto spec = resolve_forward_spec(p, KernelConfig{});
    FLASHJIT_ASSERT_OK(spec.takeError());
    ASSERT_EQ(spec->config.path, KernelPath::sm90);
    auto kernels = get_forward_kernels(*spec);
    FLASHJIT_ASSERT_OK(kernels.takeError());
    ASSERT_NE(kernels->sequence_order, nullptr);
    auto dcu_q = upload_offsets(c.cu_q);
    auto dcu_k = upload_offsets(c.cu_k);
    auto order = DeviceBuffer::allocate((batch + 1) * sizeof(int32_t));
    for (auto *buffer : {&dcu_q, &dcu_k, &order}) FLASHJIT_ASSERT_OK(buffer->takeError());
    FLASHJIT_ASSERT_OK(order->fill_bytes(0xff));
    ForwardArgs args = ForwardArgs::packed(p, nullptr, nullptr, nullptr, nullptr, nullptr);
    args.varlen = {static_cast<const int32_t *>(dcu_q->data()),
                   static_cast<const int32_t *>(dcu_k->data()), c.cu_q.back(), c.cu_k.back()};
    FwdParams params = make_forward_params(p, args);
    params.tile_counter = static_cast<int *>(order->data());
    params.sequence_order = static_cast<int *>(order->data()) + 1;
    FLASHJIT_ASSERT_OK(enqueue_sequence_order(*kernels->sequence_order, params, nullptr));
    std::vector<int32_t> got(batch + 1);
    FLASHJIT_ASSERT_OK(order->download(got.data(), got.size() * sizeof(int32_t)));
    std::vector<int32_t> expected = {0};
    expected.insert(expected.end(), c.order.begin(), c.order.end());
    EXPECT_EQ(got, expected) << to_string(c.mask);
  }
  // More sequences than the kernel orders, or no buffer: refused.
  Problem p = make_problem(DType::bf16, 1, 8, 2, 64, 64, 128, 128, MaskKind::none);
  p.varlen = true;
  auto spec = resolve_forward_spec(p, KernelConfig{});
  FLASHJIT_ASSERT_OK(spec.takeError());
  auto kernels = get_forward_kernels(*spec);
  FLASHJIT_ASSERT_OK(kernels.takeError());
  FwdParams params{};
  params.batch = static_cast<int>(kOrderedSequencesMax) + 1;
  llvm::Error refused = enqueue_sequence_order(*kernels->sequence_order, params, nullptr);
  ASSERT_TRUE(bool(refused));
  EXPECT_EQ(llvm::toString(std::move(refused)),
            "the sequence order kernel orders at most 1024 sequences into a buffer; got 1025 "
            "sequences and no buffer");
}

TEST(Sm90SanitizerVarlen, Backward) {
  FLASHJIT_REQUIRE_SM90();
  const Problem p = make_problem(DType::bf16, 1, 4, 2, 1, 1, 128, 128, MaskKind::causal);
  run_varlen_backward_case({p, {17, 0, 70}, {30, 9, 70}}, 41);
}

}  // namespace
}  // namespace flashjit
