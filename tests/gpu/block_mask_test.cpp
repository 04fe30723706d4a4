// A caller's block mask (flashjit::BlockMask) on the GPU, built
// here from the mask_mod as FlexAttention's create_block_mask builds it:
//  - at block sizes other than the kernel's tiles, broadcast or per (batch,
//    head), with packed GQA, it gives what the mask_mod gives (the
//    accuracy criterion against the reference), forward and backward, both dQ modes;
//  - it is read, not just accepted: a mask listing every block as full
//    runs the tiles without mask_mod (the plain attention), one listing
//    none hides everything;
//  - counts and indices out of range are bounded on the GPU (no read or
//    write outside the lists, the out-of-range entries ignored).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>

#include "modified_runs.h"
#include "reference/accuracy.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

using testing::make_problem;
using testing::Outputs;
using testing::run_backward;
using testing::run_forward;

using Visible = std::function<bool(int64_t b, int64_t h, int64_t q, int64_t k)>;

// A block mask's lists on the host and on the device.
struct BuiltMask {
  std::vector<int> num, indices, full_num, full_indices;
  std::optional<DeviceBuffer> dnum, dindices, dfull_num, dfull_indices;
  BlockMask mask;
};

// The lists of `visible` over `p` at blocks of bq x bk, for `batches` and
// `heads` of 1 (the (0, 0) mask for all) or the problem's: per row the
// blocks any element sees, split into the ones every element sees (full)
// and the rest (partial), as create_block_mask lists them.
BuiltMask build_mask(const Problem &p, const Visible &visible, int bq, int bk, int64_t batches,
                     int64_t heads) {
  BuiltMask m;
  BlockMask &b = m.mask;
  b.block_q = bq;
  b.block_k = bk;
  b.batches = batches;
  b.heads = heads;
  b.q_blocks = (p.seqlen_q + bq - 1) / bq;
  b.k_blocks = (p.seqlen_k + bk - 1) / bk;
  const int64_t rows = batches * heads * b.q_blocks;
  m.num.assign(rows, 0);
  m.full_num.assign(rows, 0);
  m.indices.assign(rows * b.k_blocks, -1);
  m.full_indices.assign(rows * b.k_blocks, -1);
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t qb = row % b.q_blocks, h = row / b.q_blocks % heads,
                  batch = row / (b.q_blocks * heads);
    for (int64_t kb = 0; kb < b.k_blocks; ++kb) {
      bool any = false, all = true;
      for (int64_t q = qb * bq; q < std::min<int64_t>((qb + 1) * bq, p.seqlen_q); ++q)
        for (int64_t k = kb * bk; k < std::min<int64_t>((kb + 1) * bk, p.seqlen_k); ++k) {
          const bool shown = visible(batch, h, q, k);
          any |= shown;
          all &= shown;
        }
      if (all)
        m.full_indices[row * b.k_blocks + m.full_num[row]++] = static_cast<int>(kb);
      else if (any)
        m.indices[row * b.k_blocks + m.num[row]++] = static_cast<int>(kb);
    }
  }
  auto upload = [](const std::vector<int> &host, std::optional<DeviceBuffer> &device) {
    auto buffer = DeviceBuffer::allocate(host.size() * 4);
    EXPECT_TRUE(bool(buffer));
    if (!buffer) {
      llvm::consumeError(buffer.takeError());
      return static_cast<const int *>(nullptr);
    }
    EXPECT_FALSE(bool(buffer->upload(host.data(), host.size() * 4)));
    device.emplace(std::move(*buffer));
    return static_cast<const int *>(device->data());
  };
  b.kv_num_blocks = upload(m.num, m.dnum);
  b.kv_indices = upload(m.indices, m.dindices);
  b.full_kv_num_blocks = upload(m.full_num, m.dfull_num);
  b.full_kv_indices = upload(m.full_indices, m.dfull_indices);
  return m;
}

// Irregular documents (boundaries every 151 tokens and at 263k + 9) for
// `batch` sequences of `seqlen` tokens, on the host and the device.
struct Documents {
  std::vector<int> ids;
  DeviceBuffer device;
};
llvm::Expected<Documents> upload_documents(int64_t batch, int64_t seqlen) {
  Documents d;
  d.ids.resize(batch * seqlen);
  for (size_t i = 0, doc = 0; i < d.ids.size(); ++i) {
    if (i % 151 == 0 || i % 263 == 9) ++doc;
    d.ids[i] = static_cast<int>(doc);
  }
  auto device = DeviceBuffer::from_host(d.ids.data(), d.ids.size() * 4);
  if (!device) return device.takeError();
  d.device = std::move(*device);
  return d;
}

void expect_forward_accuracy(const Problem &p, const Outputs &got, const std::vector<float> &q,
                             const std::vector<float> &k, const std::vector<float> &v,
                             const ReferenceModifiers &ref, const std::string &what) {
  const AttentionOutputs exact = cpu_attention(p, q, k, v, ReferencePrecision::exact, ref);
  const AttentionOutputs element = cpu_attention(p, q, k, v, ReferencePrecision::element, ref);
  const AccuracyReport report =
      check_forward_accuracy(got.out, exact.out, element.out, got.lse, exact.lse);
  EXPECT_TRUE(report.passed) << what << ": " << report.describe();
}

// A head-dependent document mask (odd heads also causal), its block mask
// at Flex's 128 x 128, at blocks smaller and larger than the kernel's
// tiles, per (batch, head) and broadcast where the mask allows it; with
// packed GQA (few query rows) and not; both families (sm80 evaluates
// mask_mod everywhere, so an agreeing mask changes nothing there).
TEST(BlockMaskGpu, MatchesTheMaskModAtAnyBlockSize) {
  FLASHJIT_REQUIRE_SM90();
  Modifiers m;
  m.mask_mod =
      "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
      "  return aux.doc_ids[b * aux.seqlen + q] == aux.doc_ids[b * aux.seqlen + k] &&\n"
      "         ((h & 1) == 0 || k <= q);\n"
      "}\n";
  m.aux = {{"const int*", "doc_ids"}, {"int", "seqlen"}};
  struct Case {
    int64_t heads_q, heads_kv, seqlen_q, seqlen_k;
    int bq, bk;
    KernelPath path;
  };
  for (const Case c : {Case{4, 2, 1000, 1000, 128, 128, KernelPath::sm90},
                       Case{4, 2, 1000, 1000, 64, 256, KernelPath::sm90},
                       Case{4, 4, 777, 1500, 200, 96, KernelPath::sm90},
                       Case{8, 2, 7, 1000, 16, 128, KernelPath::sm90},
                       Case{4, 2, 1000, 1000, 128, 128, KernelPath::sm80}}) {
    const Problem p = make_problem(DType::bf16, 2, c.heads_q, c.heads_kv, c.seqlen_q, c.seqlen_k,
                                   128, 128, MaskKind::none);
    const int64_t seqlen = std::max(p.seqlen_q, p.seqlen_k);
    auto documents = upload_documents(p.batch, seqlen);
    FLASHJIT_ASSERT_OK(documents.takeError());
    const std::vector<int> &docs = documents->ids;
    AuxValues aux(m);
    EXPECT_EQ(aux.set("doc_ids", static_cast<const void *>(documents->device.data())), "");
    EXPECT_EQ(aux.set("seqlen", static_cast<long long>(seqlen)), "");
    const Visible visible = [&](int64_t b, int64_t h, int64_t q, int64_t k) {
      return docs[b * seqlen + q] == docs[b * seqlen + k] && ((h & 1) == 0 || k <= q);
    };
    ReferenceModifiers ref;
    ref.visible = visible;
    const auto q = random_values(p.dtype, q_elements(p), 71);
    const auto k = random_values(p.dtype, k_elements(p), 72);
    const auto v = random_values(p.dtype, v_elements(p), 73);
    const BuiltMask built = build_mask(p, visible, c.bq, c.bk, p.batch, p.heads_q);
    const Outputs got = run_forward(p, KernelConfig{c.path}, m, &aux, q, k, v, &built.mask);
    expect_forward_accuracy(p, got, q, k, v, ref,
                            llvm::formatv("{0}x{1} blocks {2}x{3} {4}", c.seqlen_q, c.seqlen_k,
                                          c.bq, c.bk, to_string(c.path))
                                .str());
  }
}

// flashjit::create_block_mask builds on the GPU exactly the lists
// build_mask builds on the host (counts, then the indices in order, tails
// zeroed), per (batch, head) and under mask_mod_qk_only, at several block
// sizes and irregular lengths; the forward reading it matches the
// reference. Bad requests are refused before any launch.
TEST(BlockMaskGpu, CreateBlockMaskBuildsTheHostsListsOnTheGpu) {
  FLASHJIT_REQUIRE_SM90();
  struct Case {
    int64_t heads, seqlen_q, seqlen_k;
    int bq, bk;
    bool qk_only;
  };
  for (const Case c : {Case{4, 1000, 1000, 128, 128, false}, Case{3, 777, 1500, 200, 96, false},
                       Case{2, 1000, 3001, 64, 256, true}, Case{2, 5, 70, 16, 16, true}}) {
    Modifiers m;
    m.mask_mod =
        c.qk_only
            ? "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
              "  return aux.doc_ids[q] == aux.doc_ids[k] || k < 3;\n}\n"
            : "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
              "  return aux.doc_ids[b * aux.seqlen + q] == aux.doc_ids[b * aux.seqlen + k] &&\n"
              "         ((h & 1) == 0 || k <= q);\n}\n";
    m.aux = {{"const int*", "doc_ids"}, {"int", "seqlen"}};
    m.mask_mod_qk_only = c.qk_only ? MaskModQkOnly::on : MaskModQkOnly::off;
    const Problem p = make_problem(DType::bf16, 2, c.heads, c.heads, c.seqlen_q, c.seqlen_k, 128,
                                   128, MaskKind::none);
    const int64_t seqlen = std::max(p.seqlen_q, p.seqlen_k);
    auto documents = upload_documents(p.batch, seqlen);
    FLASHJIT_ASSERT_OK(documents.takeError());
    const std::vector<int> &docs = documents->ids;
    AuxValues aux(m);
    EXPECT_EQ(aux.set("doc_ids", static_cast<const void *>(documents->device.data())), "");
    EXPECT_EQ(aux.set("seqlen", static_cast<long long>(seqlen)), "");
    const Visible visible = [&](int64_t b, int64_t h, int64_t q, int64_t k) {
      if (c.qk_only) return docs[q] == docs[k] || k < 3;
      return docs[b * seqlen + q] == docs[b * seqlen + k] && ((h & 1) == 0 || k <= q);
    };
    const int64_t batches = c.qk_only ? 1 : p.batch, heads = c.qk_only ? 1 : p.heads_q;
    const BuiltMask want = build_mask(p, visible, c.bq, c.bk, batches, heads);
    // The device arrays, poisoned, described as the expected mask is.
    const size_t rows = want.num.size(), entries = want.indices.size();
    auto num = DeviceBuffer::allocate(rows * 4), full_num = DeviceBuffer::allocate(rows * 4),
         indices = DeviceBuffer::allocate(entries * 4),
         full_indices = DeviceBuffer::allocate(entries * 4);
    for (auto *b : {&num, &full_num, &indices, &full_indices}) {
      FLASHJIT_ASSERT_OK(b->takeError());
      FLASHJIT_ASSERT_OK((*b)->fill_bytes(0xff));
    }
    BlockMask out = want.mask;
    out.kv_num_blocks = static_cast<const int *>(num->data());
    out.kv_indices = static_cast<const int *>(indices->data());
    out.full_kv_num_blocks = static_cast<const int *>(full_num->data());
    out.full_kv_indices = static_cast<const int *>(full_indices->data());
    const Status built = create_block_mask(p, m, aux.data(), aux.size(), out);
    ASSERT_TRUE(built.ok()) << built.message();
    auto download = [](const DeviceBuffer &b, size_t n) {
      std::vector<int> host(n);
      EXPECT_FALSE(bool(b.download(host.data(), n * 4)));
      return host;
    };
    const std::string what = llvm::formatv("{0}x{1} blocks {2}x{3}{4}", c.seqlen_q, c.seqlen_k,
                                           c.bq, c.bk, c.qk_only ? " qk-only" : "")
                                 .str();
    EXPECT_EQ(download(*num, rows), want.num) << what;
    EXPECT_EQ(download(*full_num, rows), want.full_num) << what;
    // The host leaves -1 past the counts, the GPU zeros.
    auto zero_tails = [](std::vector<int> v) {
      for (int &x : v) x = x < 0 ? 0 : x;
      return v;
    };
    EXPECT_EQ(download(*indices, entries), zero_tails(want.indices)) << what;
    EXPECT_EQ(download(*full_indices, entries), zero_tails(want.full_indices)) << what;

    ReferenceModifiers ref;
    ref.visible = visible;
    const auto q = random_values(p.dtype, q_elements(p), 81);
    const auto k = random_values(p.dtype, k_elements(p), 82);
    const auto v = random_values(p.dtype, v_elements(p), 83);
    const Outputs got = run_forward(p, KernelConfig{KernelPath::sm90}, m, &aux, q, k, v, &out);
    expect_forward_accuracy(p, got, q, k, v, ref, what);

    // Refused before any launch: a per-head mask_mod into one shared mask.
    if (!c.qk_only) {
      BlockMask shared = out;
      shared.heads = 1;
      const Status refused = create_block_mask(p, m, aux.data(), aux.size(), shared);
      EXPECT_NE(refused.message().find("a mask_mod that may read b or h (mask_mod_qk_only off: "
                                             "given, or found by the probe) needs the problem's"),
                std::string::npos)
          << refused.message();
    }
  }
}

// A mask listing every block as full: the sm90 kernel runs every tile
// without mask_mod, so the (hiding-everything) mask_mod never applies and
// the result is plain attention; one listing nothing hides every tile
// (O = 0, LSE = +inf); counts past k_blocks and indices outside
// [0, k_blocks) are ignored, not followed.
TEST(BlockMaskGpu, IsReadAndItsListsAreBounded) {
  FLASHJIT_REQUIRE_SM90();
  Modifiers hide_all;
  hide_all.mask_mod = "__device__ bool mask_mod(int b, int h, int q, int k) { return false; }\n";
  const Problem p = make_problem(DType::fp16, 2, 4, 2, 300, 700, 64, 64, MaskKind::causal);
  const auto q = random_values(p.dtype, q_elements(p), 81);
  const auto k = random_values(p.dtype, k_elements(p), 82);
  const auto v = random_values(p.dtype, v_elements(p), 83);
  const KernelConfig sm90{KernelPath::sm90};

  BuiltMask full = build_mask(p, [](int64_t, int64_t, int64_t, int64_t) { return true; }, 64,
                              64, 1, 1);
  const Outputs plain = run_forward(p, sm90, hide_all, nullptr, q, k, v, &full.mask);
  expect_forward_accuracy(p, plain, q, k, v, {}, "every block full");

  // Nothing listed, and lists whose counts and indices are out of range:
  // hidden everywhere, read within bounds.
  BuiltMask none = build_mask(p, [](int64_t, int64_t, int64_t, int64_t) { return false; }, 64,
                              64, 1, 1);
  BuiltMask wild = build_mask(p, [](int64_t, int64_t, int64_t, int64_t) { return false; }, 64,
                              64, 1, 1);
  std::vector<int> counts(wild.num.size(), 1 << 20), indices(wild.indices.size());
  for (size_t i = 0; i < indices.size(); ++i)
    indices[i] = i % 2 ? -1 - int(i) : int(wild.mask.k_blocks + i);
  FLASHJIT_ASSERT_OK(wild.dnum->upload(counts.data(), counts.size() * 4));
  FLASHJIT_ASSERT_OK(wild.dindices->upload(indices.data(), indices.size() * 4));
  FLASHJIT_ASSERT_OK(wild.dfull_num->upload(counts.data(), counts.size() * 4));
  FLASHJIT_ASSERT_OK(wild.dfull_indices->upload(indices.data(), indices.size() * 4));
  Modifiers show_all;
  show_all.mask_mod = "__device__ bool mask_mod(int b, int h, int q, int k) { return true; }\n";
  for (const BuiltMask *mask : {&none, &wild}) {
    const Outputs got = run_forward(p, sm90, show_all, nullptr, q, k, v, &mask->mask);
    ASSERT_EQ(got.out.size(), size_t(o_elements(p)));
    for (float x : got.out) ASSERT_EQ(x, 0.f) << (mask == &wild ? "wild" : "none");
    for (float x : got.lse) ASSERT_TRUE(std::isinf(x) && x > 0) << x;
  }
}

// The backward with a caller's block mask of causal written as a mask_mod
// (create_block_mask's causal mask) at 128 x 128 and at 64 x 192, with GQA,
// meets the gradient criterion (reference/accuracy.h) against the built-in causal, in the
// default and the deterministic dQ modes (the deterministic order counts
// the map's rows, so a map the grid built wrong would never finish).
TEST(BlockMaskGpu, TheBackwardReadsItToo) {
  FLASHJIT_REQUIRE_SM90();
  Modifiers causal;
  causal.mask_mod = "__device__ bool mask_mod(int b, int h, int q, int k) { return k <= q; }\n";
  KernelConfig deterministic{KernelPath::sm90};
  deterministic.deterministic = true;
  const testing::CausalGradientCase g = testing::causal_gradient_case(1000, 128, 91);
  const Problem &plain = g.plain;
  const auto &q = g.q, &k = g.k, &v = g.v, &dout = g.dout;
  const AttentionGradients &exact = g.exact, &element = g.element;
  const Visible lower = [](int64_t, int64_t, int64_t qi, int64_t ki) { return ki <= qi; };
  for (const auto &[bq, bk] : {std::pair{128, 128}, std::pair{64, 192}}) {
    const BuiltMask built = build_mask(plain, lower, bq, bk, 1, 1);
    for (const KernelConfig &config : {KernelConfig{KernelPath::sm90}, deterministic}) {
      const AttentionGradients got = run_backward(plain, config, causal, q, k, v, dout,
                                                  &built.mask);
      ASSERT_EQ(got.dq.size(), size_t(q_elements(plain)));
      const GradientAccuracyReport report = check_gradient_accuracy(got, exact, element);
      EXPECT_TRUE(report.passed()) << bq << "x" << bk
                                   << (config.deterministic ? " deterministic" : "") << ": "
                                   << report.describe();
    }
  }
}

}  // namespace
}  // namespace flashjit
