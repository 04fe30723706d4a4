// A caller's modifiers on the GPU, forward, both families:
// causal written as a mask_mod equals the built-in causal bit for bit;
// ALiBi (a score_mod over per-head slopes) and document masking (a mask_mod
// over per-token document ids, with the built-in causal mask) match the
// reference's hook with the accuracy criterion (reference/accuracy.h). Outputs are poisoned before
// each run. Through flashjit::forward (ForwardArgs::modifiers, AuxValues).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "flashjit/backward.h"
#include "flashjit/forward.h"
#include "flashjit/mods.h"
#include "forward_check.h"
#include "modified_runs.h"
#include "reference/accuracy.h"
#include "reference/cpu_attention_backward.h"
#include "runtime/launch_backward.h"
#include "runtime/launch_forward.h"

namespace flashjit {
namespace {

using testing::make_problem;
using testing::Outputs;
using testing::run_backward;
using testing::run_forward;

const KernelConfig kFamilies[] = {KernelConfig{KernelPath::sm90}, KernelConfig{KernelPath::sm80}};

// A document mask over per-position ids (`const int* doc_ids`, one array
// for every sequence): device data, so its block map is built every call.
Modifiers documents_by_position(bool qk_only) {
  Modifiers m;
  m.mask_mod =
      "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
      "  return aux.doc_ids[q] == aux.doc_ids[k];\n"
      "}\n";
  m.aux = {{"const int*", "doc_ids"}};
  m.mask_mod_qk_only = qk_only ? MaskModQkOnly::on : MaskModQkOnly::off;
  return m;
}

TEST(ModifiersGpu, CausalAsMaskModEqualsTheBuiltInCausal) {
  FLASHJIT_REQUIRE_SM90();
  Modifiers causal;
  causal.mask_mod = "__device__ bool mask_mod(int b, int h, int q, int k) { return k <= q; }\n";
  for (const KernelConfig &family : kFamilies) {
    const Problem plain = make_problem(DType::bf16, 2, 4, 2, 333, 333, 128, 128, MaskKind::none);
    Problem built_in = plain;
    built_in.mask = MaskKind::causal;
    const auto q = random_values(plain.dtype, q_elements(plain), 1);
    const auto k = random_values(plain.dtype, k_elements(plain), 2);
    const auto v = random_values(plain.dtype, v_elements(plain), 3);
    const Outputs a = run_forward(plain, family, causal, nullptr, q, k, v);
    if (family.path == KernelPath::sm90) {
      // The block map lists the built-in causal's key tiles, the ones below
      // the diagonal shown whole: the same arithmetic, bit for bit.
      const Outputs b = run_forward(built_in, family, {}, nullptr, q, k, v);
      EXPECT_EQ(a.out, b.out) << to_string(family.path);
      EXPECT_EQ(a.lse, b.lse) << to_string(family.path);
    } else {
      // sm80 walks every key tile (no block map), the hidden ones too:
      // the accuracy criterion (reference/accuracy.h) against the causal reference.
      const AttentionOutputs exact = cpu_attention(built_in, q, k, v, ReferencePrecision::exact);
      const AttentionOutputs element =
          cpu_attention(built_in, q, k, v, ReferencePrecision::element);
      const AccuracyReport report =
          check_forward_accuracy(a.out, exact.out, element.out, a.lse, exact.lse);
      EXPECT_TRUE(report.passed) << to_string(family.path) << ": " << report.describe();
    }
  }
}

// The block map (templates/fwd_block_map.cuh) on the sm90 family: a
// document mask whose documents (1..133 tokens) hide and show whole key
// tiles and cut others, with packed GQA (decode-like rows) and without,
// causal and not, varlen-free; one map shared over batches and heads
// (mask_mod_qk_only) gives the very same result as one per (batch, head),
// and both meet the accuracy criterion (reference/accuracy.h). A mask that hides everything gives
// O = 0 and LSE = +inf, as a row that sees no key does.
TEST(ModifiersGpu, BlockMapSkipsHiddenTilesAndSharesOverBatchAndHeads) {
  FLASHJIT_REQUIRE_SM90();
  const Modifiers per_head = documents_by_position(false);
  const Modifiers shared = documents_by_position(true);
  struct Case {
    int64_t heads_q, heads_kv, seqlen_q, seqlen_k, hdim;
    MaskKind mask;
  };
  for (const Case c : {Case{4, 2, 1023, 1023, 128, MaskKind::none},
                       Case{4, 2, 1023, 1023, 64, MaskKind::causal},
                       Case{8, 1, 17, 1023, 128, MaskKind::none},
                       Case{2, 2, 113, 777, 256, MaskKind::causal}}) {
    const Problem p =
        make_problem(DType::bf16, 2, c.heads_q, c.heads_kv, c.seqlen_q, c.seqlen_k, c.hdim,
                     c.hdim, c.mask);
    std::vector<int> docs(p.seqlen_k);
    for (size_t i = 0, doc = 0; i < docs.size(); ++i) {
      if (i % 133 == 0 || i % 211 == 7) ++doc;
      docs[i] = static_cast<int>(doc);
    }
    auto ddocs = DeviceBuffer::allocate(docs.size() * 4);
    FLASHJIT_ASSERT_OK(ddocs.takeError());
    FLASHJIT_ASSERT_OK(ddocs->upload(docs.data(), docs.size() * 4));
    AuxValues aux_per_head(per_head), aux_shared(shared);
    EXPECT_EQ(aux_per_head.set("doc_ids", static_cast<const void *>(ddocs->data())), "");
    EXPECT_EQ(aux_shared.set("doc_ids", static_cast<const void *>(ddocs->data())), "");
    const auto q = random_values(p.dtype, q_elements(p), 41);
    const auto k = random_values(p.dtype, k_elements(p), 42);
    const auto v = random_values(p.dtype, v_elements(p), 43);
    const KernelConfig sm90{KernelPath::sm90};
    const Outputs a = run_forward(p, sm90, per_head, &aux_per_head, q, k, v);
    const Outputs b = run_forward(p, sm90, shared, &aux_shared, q, k, v);
    EXPECT_EQ(a.out, b.out) << c.seqlen_q << "x" << c.seqlen_k;
    EXPECT_EQ(a.lse, b.lse) << c.seqlen_q << "x" << c.seqlen_k;
    // The ids of query position q and key position k (not aligned: mask_mod
    // sees positions in the sequence).
    ReferenceModifiers ref;
    ref.visible = [&](int64_t, int64_t, int64_t qi, int64_t ki) {
      return docs[qi] == docs[ki];
    };
    const AttentionOutputs exact = cpu_attention(p, q, k, v, ReferencePrecision::exact, ref);
    const AttentionOutputs element = cpu_attention(p, q, k, v, ReferencePrecision::element, ref);
    const AccuracyReport report =
        check_forward_accuracy(a.out, exact.out, element.out, a.lse, exact.lse);
    EXPECT_TRUE(report.passed) << c.seqlen_q << "x" << c.seqlen_k << " d" << c.hdim << " "
                               << to_string(c.mask) << ": " << report.describe();
  }
  // Nothing visible: every tile hidden, none loaded.
  Modifiers none;
  none.mask_mod = "__device__ bool mask_mod(int b, int h, int q, int k) { return false; }\n";
  none.mask_mod_qk_only = MaskModQkOnly::on;
  const Problem p = make_problem(DType::fp16, 1, 2, 2, 300, 300, 64, 64, MaskKind::none);
  const auto q = random_values(p.dtype, q_elements(p), 51);
  const Outputs got = run_forward(p, KernelConfig{KernelPath::sm90}, none, nullptr, q, q, q);
  ASSERT_EQ(got.out.size(), size_t(o_elements(p)));
  for (float x : got.out) ASSERT_EQ(x, 0.f);
  for (float x : got.lse) ASSERT_TRUE(std::isinf(x) && x > 0) << x;
}

TEST(ModifiersGpu, AlibiAndDocumentsMatchTheReference) {
  FLASHJIT_REQUIRE_SM90();
  Modifiers m;
  m.score_mod =
      "__device__ float score_mod(float score, int b, int h, int q, int k, const Aux &aux) {\n"
      "  return score + aux.slopes[h] * (k - q);\n"
      "}\n";
  m.mask_mod =
      "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
      "  return aux.doc_ids[b * aux.seqlen + q] == aux.doc_ids[b * aux.seqlen + k];\n"
      "}\n";
  m.aux = {{"const float*", "slopes"}, {"const int*", "doc_ids"}, {"int", "seqlen"}};
  for (const KernelConfig &family : kFamilies)
    for (MaskKind mask : {MaskKind::none, MaskKind::causal}) {
      const Problem p = make_problem(DType::fp16, 2, 6, 2, 300, 300, 64, 64, mask);
      std::vector<float> slopes(p.heads_q);
      for (int64_t h = 0; h < p.heads_q; ++h) slopes[h] = -std::exp2(-8.0 * (h + 1) / p.heads_q);
      // Documents of 1..90 tokens, different in each sequence.
      std::vector<int> docs(p.batch * p.seqlen_q);
      for (size_t i = 0, doc = 0; i < docs.size(); ++i) {
        if (i % 37 == 0 || i % 91 == 5) ++doc;
        docs[i] = static_cast<int>(doc);
      }
      auto dslopes = DeviceBuffer::allocate(slopes.size() * 4);
      auto ddocs = DeviceBuffer::allocate(docs.size() * 4);
      FLASHJIT_ASSERT_OK(dslopes.takeError());
      FLASHJIT_ASSERT_OK(ddocs.takeError());
      FLASHJIT_ASSERT_OK(dslopes->upload(slopes.data(), slopes.size() * 4));
      FLASHJIT_ASSERT_OK(ddocs->upload(docs.data(), docs.size() * 4));
      AuxValues aux(m);
      EXPECT_EQ(aux.set("slopes", static_cast<const void *>(dslopes->data())), "");
      EXPECT_EQ(aux.set("doc_ids", static_cast<const void *>(ddocs->data())), "");
      EXPECT_EQ(aux.set("seqlen", static_cast<long long>(p.seqlen_q)), "");

      const auto q = random_values(p.dtype, q_elements(p), 11);
      const auto k = random_values(p.dtype, k_elements(p), 12);
      const auto v = random_values(p.dtype, v_elements(p), 13);
      const Outputs got = run_forward(p, family, m, &aux, q, k, v);
      ReferenceModifiers ref;
      ref.score = [&](double s, int64_t, int64_t h, int64_t qi, int64_t ki) {
        return s + double(slopes[h]) * double(ki - qi);
      };
      ref.visible = [&](int64_t b, int64_t, int64_t qi, int64_t ki) {
        return docs[b * p.seqlen_q + qi] == docs[b * p.seqlen_q + ki];
      };
      const AttentionOutputs exact = cpu_attention(p, q, k, v, ReferencePrecision::exact, ref);
      const AttentionOutputs element = cpu_attention(p, q, k, v, ReferencePrecision::element, ref);
      const AccuracyReport report =
          check_forward_accuracy(got.out, exact.out, element.out, got.lse, exact.lse);
      EXPECT_TRUE(report.passed) << to_string(family.path) << " " << to_string(mask) << ": "
                                 << report.describe();
    }
}

// Every shipped modifier (flashjit/mods.h) against the reference's twin of
// it, both families, both dtypes; then a new sequence length with the same
// modifier compiles nothing.
TEST(ModifiersGpu, ShippedModifiersMatchTheReference) {
  FLASHJIT_REQUIRE_SM90();
  const Problem base = make_problem(DType::bf16, 2, 6, 2, 300, 300, 128, 128, MaskKind::none);
  std::vector<float> slopes(base.heads_q), table(base.heads_q * 9);
  for (size_t i = 0; i < slopes.size(); ++i) slopes[i] = -std::exp2(-8.0 * (i + 1) / 6);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.25f * std::sin(0.7f * float(i));
  std::vector<int> docs(base.batch * base.seqlen_q);
  for (size_t i = 0, doc = 0; i < docs.size(); ++i) {
    if (i % 41 == 0) ++doc;
    docs[i] = static_cast<int>(doc);
  }
  auto dslopes = DeviceBuffer::allocate(slopes.size() * 4);
  auto dtable = DeviceBuffer::allocate(table.size() * 4);
  auto ddocs = DeviceBuffer::allocate(docs.size() * 4);
  FLASHJIT_ASSERT_OK(dslopes.takeError());
  FLASHJIT_ASSERT_OK(dtable.takeError());
  FLASHJIT_ASSERT_OK(ddocs.takeError());
  FLASHJIT_ASSERT_OK(dslopes->upload(slopes.data(), slopes.size() * 4));
  FLASHJIT_ASSERT_OK(dtable->upload(table.data(), table.size() * 4));
  FLASHJIT_ASSERT_OK(ddocs->upload(docs.data(), docs.size() * 4));
  const int64_t seqlen = base.seqlen_q;
  struct Shipped {
    const char *name;
    Modifiers modifiers;
    ReferenceModifiers reference;
  };
  std::vector<Shipped> shipped;
  {
    ReferenceModifiers r;
    r.score = [&](double s, int64_t, int64_t h, int64_t q, int64_t k) {
      return s + double(slopes[h]) * double(k - q);
    };
    shipped.push_back({"alibi", mods::alibi(), r});
  }
  {
    ReferenceModifiers r;
    r.score = [&](double s, int64_t, int64_t h, int64_t q, int64_t k) {
      const int64_t d = std::clamp<int64_t>(k - q, -4, 4);
      return s + double(table[h * 9 + d + 4]);
    };
    shipped.push_back({"relative_bias", mods::relative_bias(), r});
  }
  {
    ReferenceModifiers r;
    r.visible = [&](int64_t b, int64_t, int64_t q, int64_t k) {
      return docs[b * seqlen + q] == docs[b * seqlen + k];
    };
    shipped.push_back({"document_mask", mods::document_mask(), r});
  }
  {
    ReferenceModifiers r;
    r.visible = [](int64_t, int64_t, int64_t q, int64_t k) { return k < 50 || k <= q; };
    shipped.push_back({"prefix_lm", mods::prefix_lm(), r});
  }
  {
    ReferenceModifiers r;
    r.visible = [](int64_t, int64_t, int64_t q, int64_t k) {
      return k <= q && (q - k < 64 || k < 4);
    };
    shipped.push_back({"sliding_window_with_sinks", mods::sliding_window_with_sinks(), r});
  }
  for (const Shipped &one : shipped) {
    AuxValues aux(one.modifiers);
    ASSERT_EQ(aux.error(), "") << one.name;
    // Each sets the fields it has; the others answer "no aux field".
    (void)aux.set("slopes", static_cast<const void *>(dslopes->data()));
    (void)aux.set("table", static_cast<const void *>(dtable->data()));
    (void)aux.set("max_distance", 4LL);
    (void)aux.set("doc_ids", static_cast<const void *>(ddocs->data()));
    (void)aux.set("seqlen", static_cast<long long>(seqlen));
    (void)aux.set("prefix", 50LL);
    (void)aux.set("window", 64LL);
    (void)aux.set("sinks", 4LL);
    (void)aux.set("cap", 20.f);
    for (const KernelConfig &family : kFamilies)
      for (DType dtype : {DType::bf16, DType::fp16}) {
        Problem p = base;
        p.dtype = dtype;
        const auto q = random_values(p.dtype, q_elements(p), 21);
        const auto k = random_values(p.dtype, k_elements(p), 22);
        const auto v = random_values(p.dtype, v_elements(p), 23);
        const Outputs got = run_forward(p, family, one.modifiers, &aux, q, k, v);
        const AttentionOutputs exact =
            cpu_attention(p, q, k, v, ReferencePrecision::exact, one.reference);
        const AttentionOutputs element =
            cpu_attention(p, q, k, v, ReferencePrecision::element, one.reference);
        const AccuracyReport report =
            check_forward_accuracy(got.out, exact.out, element.out, got.lse, exact.lse);
        EXPECT_TRUE(report.passed) << one.name << " " << to_string(family.path) << " "
                                   << to_string(dtype) << ": " << report.describe();
      }
  }
  // A new sequence length with the same modifier compiles nothing: once the
  // class's two forward programs are loaded (split-KV, which 300 takes, and
  // unsplit, which 777 takes), no length compiles.
  const Modifiers alibi = mods::alibi();
  AuxValues aux(alibi);
  (void)aux.set("slopes", static_cast<const void *>(dslopes->data()));
  Problem p = base;
  const auto q = random_values(p.dtype, 2 * 777 * 6 * 128, 31);
  for (int64_t n : {300, 777, 301, 500, 776}) {
    p.seqlen_q = p.seqlen_k = n;
    const std::vector<float> qs(q.begin(), q.begin() + q_elements(p));
    const std::vector<float> ks(q.begin(), q.begin() + k_elements(p));
    const uint64_t before = runtime_stats().compiles;
    (void)run_forward(p, KernelConfig{KernelPath::sm90}, alibi, &aux, qs, ks, ks);
    if (n != 300 && n != 777) {
      EXPECT_EQ(runtime_stats().compiles, before) << "seqlen " << n;
    }
  }
}

// A mask_mod of (q, k) and scalar aux values alone keeps its block map
// across calls (runtime/block_map_cache.h): a second call of the shape
// launches no map kernel (kinds, list, runs) and gives the same bits;
// another aux value builds a map of its own, which meets the accuracy
// criterion; a mask reading device data (document ids, which may change
// under the same pointer) builds its map on every call.
TEST(ModifiersGpu, AShapeOnlyMaskKeepsItsBlockMapAcrossCalls) {
  FLASHJIT_REQUIRE_SM90();
  const Problem p = make_problem(DType::bf16, 2, 4, 4, 700, 700, 128, 128, MaskKind::none);
  const auto q = random_values(p.dtype, q_elements(p), 41);
  const auto k = random_values(p.dtype, k_elements(p), 42);
  const auto v = random_values(p.dtype, v_elements(p), 43);
  const KernelConfig sm90{KernelPath::sm90};
  auto counted = [&](const Modifiers &m, const AuxValues &aux, uint64_t &launches) {
    const uint64_t before = runtime_stats().launches;
    Outputs out = run_forward(p, sm90, m, &aux, q, k, v);
    launches = runtime_stats().launches - before;
    return out;
  };
  const Modifiers window = mods::sliding_window_with_sinks();
  for (long long w : {97LL, 300LL}) {
    AuxValues aux(window);
    ASSERT_EQ(aux.set("window", w), "");
    ASSERT_EQ(aux.set("sinks", 3LL), "");
    uint64_t first = 0, second = 0;
    const Outputs a = counted(window, aux, first);
    const Outputs b = counted(window, aux, second);
    EXPECT_EQ(first - second, 3u) << "window " << w;
    EXPECT_EQ(a.out, b.out) << "window " << w;
    EXPECT_EQ(a.lse, b.lse) << "window " << w;
    ReferenceModifiers r;
    r.visible = [w](int64_t, int64_t, int64_t qi, int64_t ki) {
      return ki <= qi && (qi - ki < w || ki < 3);
    };
    const AttentionOutputs exact = cpu_attention(p, q, k, v, ReferencePrecision::exact, r);
    const AttentionOutputs element = cpu_attention(p, q, k, v, ReferencePrecision::element, r);
    const AccuracyReport report =
        check_forward_accuracy(b.out, exact.out, element.out, b.lse, exact.lse);
    EXPECT_TRUE(report.passed) << "window " << w << ": " << report.describe();
  }
  const Modifiers documents = documents_by_position(true);
  std::vector<int> docs(p.seqlen_q);
  for (size_t i = 0; i < docs.size(); ++i) docs[i] = static_cast<int>(i / 150);
  auto ddocs = DeviceBuffer::allocate(docs.size() * 4);
  FLASHJIT_ASSERT_OK(ddocs.takeError());
  FLASHJIT_ASSERT_OK(ddocs->upload(docs.data(), docs.size() * 4));
  AuxValues aux(documents);
  ASSERT_EQ(aux.set("doc_ids", static_cast<const void *>(ddocs->data())), "");
  uint64_t first = 0, second = 0;
  (void)counted(documents, aux, first);
  (void)counted(documents, aux, second);
  EXPECT_EQ(first, second);
}

}  // namespace
}  // namespace flashjit

namespace flashjit {
namespace {

// The backward's block map (templates/bwd_block_map.cuh): causal written as
// a mask_mod, per KV group and shared (mask_mod_qk_only), meets the
// gradient criterion against the built-in causal's reference on irregular
// lengths with GQA, at the head dims whose sm90 tiles differ, in the default
// and the deterministic dQ modes (whose order counts the map's rows: a wrong
// count would never finish); the deterministic mode stays bit-identical.
TEST(ModifiersGpu, BackwardBlockMapMatchesTheBuiltInCausal) {
  FLASHJIT_REQUIRE_SM90();
  Modifiers per_group;
  per_group.mask_mod = "__device__ bool mask_mod(int b, int h, int q, int k) { return k <= q; }\n";
  Modifiers shared = per_group;
  // Explicit both ways: left automatic, the probe finds this mask_mod reads
  // neither b nor h and shares its map.
  per_group.mask_mod_qk_only = MaskModQkOnly::off;
  shared.mask_mod_qk_only = MaskModQkOnly::on;
  KernelConfig deterministic{KernelPath::sm90};
  deterministic.deterministic = true;
  struct Case {
    int64_t seqlen, hdim;
  };
  for (const Case c : {Case{333, 64}, Case{1000, 128}, Case{777, 256}}) {
    const testing::CausalGradientCase g = testing::causal_gradient_case(c.seqlen, c.hdim, 61);
    const Problem &plain = g.plain;
    const auto &q = g.q, &k = g.k, &v = g.v, &dout = g.dout;
    const AttentionGradients &exact = g.exact, &element = g.element;
    for (const KernelConfig &config : {KernelConfig{KernelPath::sm90}, deterministic})
      for (const Modifiers *m : {&per_group, &shared}) {
        const AttentionGradients got = run_backward(plain, config, *m, q, k, v, dout);
        ASSERT_EQ(got.dq.size(), size_t(q_elements(plain)));
        const GradientAccuracyReport report = check_gradient_accuracy(got, exact, element);
        EXPECT_TRUE(report.passed())
            << c.seqlen << " d" << c.hdim << (config.deterministic ? " deterministic" : "")
            << (m->mask_mod_qk_only == MaskModQkOnly::on ? " shared" : " per group") << ": "
            << report.describe();
      }
    const AttentionGradients once = run_backward(plain, deterministic, per_group, q, k, v, dout);
    const AttentionGradients again = run_backward(plain, deterministic, per_group, q, k, v, dout);
    EXPECT_EQ(once.dq, again.dq) << c.seqlen;
    EXPECT_EQ(once.dk, again.dk) << c.seqlen;
    EXPECT_EQ(once.dv, again.dv) << c.seqlen;
    // The shared maps (a mask of (q, k), no aux) were kept by the loop's
    // first shared call (runtime/block_map_cache.h): a call (the forward
    // for the LSE, then the backward) launches none of their kernels, where
    // the per-group maps, built every call, launch five (the forward's
    // kinds, list and runs; the backward's kinds and list), and gives the
    // same bits as the loop's.
    uint64_t before = runtime_stats().launches;
    const AttentionGradients shared_once =
        run_backward(plain, deterministic, shared, q, k, v, dout);
    const uint64_t shared_launches = runtime_stats().launches - before;
    before = runtime_stats().launches;
    (void)run_backward(plain, deterministic, per_group, q, k, v, dout);
    EXPECT_EQ(runtime_stats().launches - before, shared_launches + 5) << c.seqlen;
    const AttentionGradients shared_again =
        run_backward(plain, deterministic, shared, q, k, v, dout);
    EXPECT_EQ(shared_once.dq, shared_again.dq) << c.seqlen;
    EXPECT_EQ(shared_once.dk, shared_again.dk) << c.seqlen;
  }
}

}  // namespace
}  // namespace flashjit
