// The tuner's selection logic without a GPU: successive halving with a fake
// timer (fixed medians per index, a failing candidate, ties, the budget),
// the candidate set and its pruning, and the post-compile rejection rules.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "generator/fwd_sm80_traits.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "tuner/candidates.h"
#include "tuner/search.h"

namespace flashjit {
namespace {

// Deterministic medians per index; records every call's repeats.
struct FakeTimer {
  std::vector<double> medians;
  std::set<int> failing;
  std::map<int, std::vector<int>> calls;  // index -> repeats of each call

  CandidateTimer timer() {
    return [this](int index, int repeats) -> llvm::Expected<Measurement> {
      calls[index].push_back(repeats);
      if (failing.count(index))
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "launch failed: too many resources requested");
      const double m = medians.at(index);
      return Measurement{m, m * 0.99, m * 1.01};
    };
  }
  int total_repeats() const {
    int n = 0;
    for (const auto &[index, reps] : calls)
      for (int r : reps) n += r;
    return n;
  }
};

TEST(SuccessiveHalving, WinnerIsTheFastestAndRepeatsDouble) {
  FakeTimer fake;
  fake.medians = {5, 3, 8, 1.5, 7, 2, 6, 4};
  auto scores = successive_halving(8, fake.timer());
  ASSERT_EQ(scores.size(), 8u);
  EXPECT_EQ(scores[0].index, 3);
  EXPECT_TRUE(scores[0].finalist);
  EXPECT_DOUBLE_EQ(scores[0].median_ms, 1.5);
  // 8 -> 4 -> final of 2: the fastest is timed with 5, 10, then 40 repeats.
  EXPECT_EQ(fake.calls[3], (std::vector<int>{5, 10, 40}));
  EXPECT_EQ(fake.calls[5], (std::vector<int>{5, 10, 40}));  // the runner-up
  // Those dropped in round 1 are timed once, with the fewest repeats.
  for (int slow : {0, 2, 4, 6}) EXPECT_EQ(fake.calls[slow], (std::vector<int>{5})) << slow;
  EXPECT_EQ(fake.calls[1], (std::vector<int>{5, 10}));
  EXPECT_EQ(scores[0].timed_runs, 55);
  // Order: the two finalists, then round-2 losers, then round-1 losers,
  // each by median.
  std::vector<int> order;
  for (const CandidateScore &s : scores) order.push_back(s.index);
  EXPECT_EQ(order, (std::vector<int>{3, 5, 1, 7, 0, 6, 4, 2}));
}

TEST(SuccessiveHalving, FailuresScoreInfinityAndAreDroppedAtOnce) {
  FakeTimer fake;
  fake.medians = {1, 2, 3, 4, 5};
  fake.failing = {0};  // the fastest would have been index 0
  auto scores = successive_halving(5, fake.timer());
  ASSERT_EQ(scores.size(), 5u);
  EXPECT_EQ(scores[0].index, 1);
  EXPECT_EQ(scores.back().index, 0);
  EXPECT_TRUE(std::isinf(scores.back().median_ms));
  EXPECT_NE(scores.back().failure.find("too many resources"), std::string::npos);
  EXPECT_FALSE(scores.back().finalist);
  EXPECT_EQ(fake.calls[0].size(), 1u);
}

TEST(SuccessiveHalving, EveryFailureLeavesNoWinner) {
  FakeTimer fake;
  fake.medians = {1, 2, 3};
  fake.failing = {0, 1, 2};
  auto scores = successive_halving(3, fake.timer());
  ASSERT_EQ(scores.size(), 3u);
  for (const CandidateScore &s : scores) {
    EXPECT_FALSE(s.failure.empty());
    EXPECT_FALSE(s.finalist);
  }
  EXPECT_EQ(scores[0].index, 0);  // failures ordered by index
}

TEST(SuccessiveHalving, TiesGoToTheLowerIndex) {
  FakeTimer fake;
  fake.medians = std::vector<double>(6, 2.0);
  auto scores = successive_halving(6, fake.timer());
  EXPECT_EQ(scores[0].index, 0);  // the heuristic's slot wins a tie
  EXPECT_EQ(scores[1].index, 1);
  // 6 -> keep 3 -> keep 2 -> final: indices 0 and 1 every time.
  EXPECT_EQ(fake.calls[0], (std::vector<int>{5, 10, 40}));
  EXPECT_EQ(fake.calls[2], (std::vector<int>{5, 10}));
  EXPECT_EQ(fake.calls[5], (std::vector<int>{5}));
}

TEST(SuccessiveHalving, KeepAtLeastSetsTheFinalSize) {
  FakeTimer fake;
  fake.medians = {8, 7, 6, 5, 4, 3, 2, 1};
  HalvingOptions options;
  options.keep_at_least = 3;
  auto scores = successive_halving(8, fake.timer(), options);
  int finalists = 0;
  for (const CandidateScore &s : scores) finalists += s.finalist;
  EXPECT_EQ(finalists, 3);  // 8 -> 4 -> 3 (final)
  EXPECT_EQ(scores[0].index, 7);
  EXPECT_EQ(fake.calls[5], (std::vector<int>{5, 10, 40}));
  EXPECT_EQ(fake.calls[4], (std::vector<int>{5, 10}));
}

TEST(SuccessiveHalving, AtLeastTwoSurviveEveryRound) {
  FakeTimer fake;
  fake.medians = {3, 1, 2};
  auto scores = successive_halving(3, fake.timer());
  // 3 -> 2 (ceil(3/2)) -> final of 2.
  EXPECT_EQ(fake.calls[1], (std::vector<int>{5, 40}));
  EXPECT_EQ(fake.calls[2], (std::vector<int>{5, 40}));
  EXPECT_EQ(fake.calls[0], (std::vector<int>{5}));
  EXPECT_EQ(scores[0].index, 1);
}

TEST(SuccessiveHalving, OneOrTwoCandidatesGoStraightToTheFinal) {
  for (int count : {1, 2}) {
    FakeTimer fake;
    fake.medians = {2, 1};
    auto scores = successive_halving(count, fake.timer());
    ASSERT_EQ(int(scores.size()), count);
    EXPECT_EQ(scores[0].index, count - 1);
    for (int i = 0; i < count; ++i) EXPECT_EQ(fake.calls[i], (std::vector<int>{40}));
  }
  FakeTimer none;
  EXPECT_TRUE(successive_halving(0, none.timer()).empty());
  EXPECT_TRUE(none.calls.empty());
}

TEST(SuccessiveHalving, AlwaysFinalIsRetimedWithTheFinalists) {
  FakeTimer fake;
  fake.medians = {9, 1, 2, 3, 4, 5, 6, 7};  // index 0 (the heuristic) is slowest
  HalvingOptions options;
  options.always_final = {0};
  auto scores = successive_halving(8, fake.timer(), options);
  EXPECT_EQ(scores[0].index, 1);
  EXPECT_EQ(fake.calls[0], (std::vector<int>{5, 40}));
  const CandidateScore *heuristic = nullptr;
  for (const CandidateScore &s : scores)
    if (s.index == 0) heuristic = &s;
  ASSERT_NE(heuristic, nullptr);
  EXPECT_TRUE(heuristic->finalist);
  EXPECT_EQ(heuristic->repeats, 40);
  EXPECT_EQ(scores[2].index, 0);  // the third finalist, slowest of them
}

TEST(SuccessiveHalving, AlwaysFinalThatFailedStaysDropped) {
  FakeTimer fake;
  fake.medians = {1, 2, 3, 4, 5};
  fake.failing = {0};
  HalvingOptions options;
  options.always_final = {0, 17, -1};  // out-of-range indices are ignored
  auto scores = successive_halving(5, fake.timer(), options);
  EXPECT_EQ(fake.calls[0].size(), 1u);
  EXPECT_EQ(scores.back().index, 0);
}

TEST(SuccessiveHalving, NonFiniteTimesAreFailures) {
  FakeTimer fake;
  fake.medians = {NAN, 2, -1, 1};
  auto scores = successive_halving(4, fake.timer());
  EXPECT_EQ(scores[0].index, 3);
  EXPECT_FALSE(scores[2].failure.empty());
  EXPECT_FALSE(scores[3].failure.empty());
}

TEST(SuccessiveHalving, BudgetCutsRoundsAndFinalRepeats) {
  FakeTimer fake;
  fake.medians = std::vector<double>(16, 1.0);
  fake.medians[9] = 0.5;
  HalvingOptions options;
  // Round 1 costs 16 x 5 x ~1 ms = ~77 ms; another round (8 x 10) and a
  // final (2 x 40) do not fit in 100 ms, so the best two go to a final with
  // what is left: floor((100 - 77.5) / 1.5) = 15 repeats.
  options.budget_ms = 100;
  auto scores = successive_halving(16, fake.timer(), options);
  EXPECT_EQ(scores[0].index, 9);
  EXPECT_EQ(fake.calls[9], (std::vector<int>{5, 15}));
  EXPECT_EQ(fake.calls[0], (std::vector<int>{5, 15}));  // tie: lower index
  EXPECT_EQ(fake.calls[1], (std::vector<int>{5}));
  int finalists = 0;
  for (const CandidateScore &s : scores) finalists += s.finalist;
  EXPECT_EQ(finalists, 2);

  // Without a budget the same search spends several times more.
  FakeTimer unlimited;
  unlimited.medians = fake.medians;
  successive_halving(16, unlimited.timer());
  EXPECT_GT(unlimited.total_repeats(), 2 * fake.total_repeats());
}

TEST(SuccessiveHalving, FinalNeverHasFewerRepeatsThanTheLastRound) {
  FakeTimer fake;
  fake.medians = std::vector<double>(8, 10.0);
  HalvingOptions options;
  options.budget_ms = 1;  // already spent after round 1
  auto scores = successive_halving(8, fake.timer(), options);
  EXPECT_EQ(fake.calls[0], (std::vector<int>{5, 5}));
}

// ---- candidates --------------------------------------------------------------

Problem problem_with(int d, MaskKind mask = MaskKind::causal) {
  Problem p;
  p.batch = 2;
  p.heads_q = p.heads_kv = 8;
  p.seqlen_q = p.seqlen_k = 1024;
  p.head_dim_qk = p.head_dim_v = d;
  p.mask = mask;
  return p;
}

constexpr TargetArch kSm90a{9, 0, true};

TEST(ForwardCandidates, HeuristicFirstEveryConfigValidNoDuplicates) {
  for (int d : {64, 96, 128, 256}) {
    const Problem p = problem_with(d);
    const int smem = max_smem_per_block(kSm90a);
    CandidateSet set = forward_candidates(p, kSm90a, smem);
    ASSERT_FALSE(set.configs.empty()) << d;
    EXPECT_EQ(set.configs.front(), default_forward_config(p, kSm90a, smem)) << d;
    std::set<std::tuple<int, int, int, int, int>> seen;
    size_t sm90 = 0;
    for (const KernelConfig &c : set.configs) {
      EXPECT_TRUE(c.is_complete());
      EXPECT_TRUE(seen.insert({int(c.path), c.block_m, c.block_n, c.warps, c.stages}).second)
          << "duplicate " << describe(c);
      if (c.path == KernelPath::sm90) {
        ++sm90;
        EXPECT_TRUE(bool(FwdSm90Traits::make(d, d, c.block_m, c.block_n, c.warps, c.stages, smem,
                                             FwdSm90Traits::lean(p, false))))
            << describe(c);
        continue;
      }
      EXPECT_EQ(c.path, KernelPath::sm80);
      auto traits = FwdSm80Traits::make(d, d, c.block_m, c.block_n, c.warps, c.stages, smem);
      EXPECT_TRUE(bool(traits)) << describe(c);
      if (!traits) llvm::consumeError(traits.takeError());
    }
    // Both families on sm_90a where sm90 serves the head dim (64, 128, 256):
    // the whole sm80 grid (3 x 3 x 2 x 2) plus sm90's search space.
    const size_t sm90_space = sm90_fallback_reason(p, kSm90a).empty()
                                  ? FwdSm90Traits::search_space(d, smem,
                                                                FwdSm90Traits::lean(p, false))
                                        .size()
                                  : 0;
    EXPECT_EQ(sm90, sm90_space) << d;
    EXPECT_EQ(set.configs.size() + set.pruned.size(), 36u + sm90_space) << d;
    for (const PrunedConfig &pruned : set.pruned) EXPECT_FALSE(pruned.reason.empty());
  }
}

// Unequal head dims: the search covers the wider one's tiles, as the
// heuristic and validation take them. qk 64 / v 128, lean, without a mask
// beyond 2048 queries: the heuristic's 128x160 is the first candidate, d=128's
// widest (176) is searched, and d=64's three warpgroups are not offered.
TEST(ForwardCandidates, UnequalHeadDimsSearchTheWiderOnesTiles) {
  Problem p = problem_with(64, MaskKind::none);
  p.head_dim_v = 128;
  p.seqlen_q = p.seqlen_k = 8192;
  const int smem = max_smem_per_block(kSm90a);
  const CandidateSet set = forward_candidates(p, kSm90a, smem);
  ASSERT_FALSE(set.configs.empty());
  const KernelConfig heuristic = default_forward_config(p, kSm90a, smem);
  EXPECT_EQ(heuristic.block_n, 160);
  EXPECT_EQ(set.configs.front(), heuristic);
  int widest = 0, rows_192 = 0;
  for (const KernelConfig &c : set.configs) {
    if (c.path != KernelPath::sm90) continue;
    widest += c.block_m == 128 && c.block_n == 176;
    rows_192 += c.block_m == 192;
  }
  EXPECT_EQ(widest, 1);  // 2 stages: 3 do not fit shared memory
  EXPECT_EQ(rows_192, 0);
  for (const PrunedConfig &pruned : set.pruned)
    EXPECT_EQ(pruned.config.path, KernelPath::sm80) << describe(pruned.config) << pruned.reason;
}

// A decode problem: every candidate's splits and pack_gqa are concrete, as
// the heuristic fills them for its tiles, so the heuristic's tiles are one
// candidate and what a tuning stores is what its kernel ran.
TEST(ForwardCandidates, DecodeTilesAreSearchedOverPackingAndSplits) {
  Problem p = problem_with(128, MaskKind::none);
  p.heads_q = 32;
  p.heads_kv = 8;
  p.seqlen_q = 1;
  p.seqlen_k = 8192;
  const int smem = max_smem_per_block(kSm90a);
  const CandidateSet set = forward_candidates(p, kSm90a, smem);
  ASSERT_FALSE(set.configs.empty());
  EXPECT_EQ(set.configs.front(), default_forward_config(p, kSm90a, smem));
  // Tiles -> the (packing, splits) variants they come in.
  std::map<std::tuple<int, int, int, int, int>, std::set<std::pair<int, int>>> variants;
  for (const KernelConfig &c : set.configs) {
    SCOPED_TRACE(describe(c));
    EXPECT_GE(c.splits, 1);
    EXPECT_NE(c.pack_gqa, GqaPacking::automatic);
    const auto tiles = std::make_tuple(int(c.path), c.block_m, c.block_n, c.warps, c.stages);
    EXPECT_TRUE(variants[tiles].insert({int(c.pack_gqa), c.splits}).second)
        << "the same config twice";
    KernelConfig tiles_only = c;
    tiles_only.splits = 0;
    tiles_only.pack_gqa = GqaPacking::automatic;
    const KernelConfig heuristic = with_decode_fields(p, tiles_only, 0);
    if (c.path == KernelPath::sm80 || c.block_m != 64) {
      // Tiles of more rows come with the heuristic's fields only.
      EXPECT_EQ(c, heuristic);
    }
    // Each builds its spec: split_kv and the packed heads as the config says.
    auto spec = make_forward_spec(p, c, kSm90a, smem);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    EXPECT_EQ(spec->split_kv, c.splits > 1);
    EXPECT_EQ(spec->pack_gqa, c.pack_gqa == GqaPacking::on ? 4 : 1);
  }
  // The heuristic's decode tile: packed and not, and around each packing's
  // split count (2 x 8 work tiles packed on 132 SMs: 8; unpacked 64: 2).
  KernelConfig packed = default_forward_config(p, kSm90a, smem);
  ASSERT_EQ(packed.block_m, 64);
  ASSERT_EQ(packed.pack_gqa, GqaPacking::on);
  KernelConfig unpacked_tiles = packed;
  unpacked_tiles.splits = 0;
  unpacked_tiles.pack_gqa = GqaPacking::off;
  const KernelConfig unpacked = with_decode_fields(p, unpacked_tiles, 0);
  const int on = int(GqaPacking::on), off = int(GqaPacking::off);
  std::set<std::pair<int, int>> expected = {
      {on, packed.splits},      {on, 1},   {on, packed.splits / 2}, {on, packed.splits * 2},
      {off, unpacked.splits},   {off, 1}};
  if (unpacked.splits / 2 >= 1) expected.insert({off, unpacked.splits / 2});
  expected.insert({off, unpacked.splits * 2});
  const auto tiles = std::make_tuple(int(packed.path), packed.block_m, packed.block_n,
                                     packed.warps, packed.stages);
  EXPECT_EQ(variants[tiles], expected);
}

TEST(ForwardCandidates, SmallSharedMemoryPrunesBigTilesWithReasons) {
  const Problem p = problem_with(128);
  const int limit = 99 * 1024;
  CandidateSet big = forward_candidates(p, kSm90a, max_smem_per_block(kSm90a));
  CandidateSet small = forward_candidates(p, kSm90a, limit);
  EXPECT_LT(small.configs.size(), big.configs.size());
  for (const KernelConfig &c : small.configs) {
    const int smem = c.path == KernelPath::sm90
                         ? FwdSm90Traits{128, c.block_m, c.block_n, c.warps, c.stages}.smem_bytes()
                         : FwdSm80Traits{128, 128, c.block_m, c.block_n, c.warps, c.stages}
                               .smem_bytes();
    EXPECT_LE(smem, limit) << describe(c);
  }
  int smem_reasons = 0;
  for (const PrunedConfig &pruned : small.pruned)
    if (pruned.reason.find("shared memory") != std::string::npos) ++smem_reasons;
  EXPECT_GT(smem_reasons, 0);
  // e.g. 256 x 128 x 8 warps x 3 stages needs 160 KB + 64 KB.
  bool found = false;
  // (Its splits are the heuristic's for the problem; the tiles decide.)
  const KernelConfig big_tile{KernelPath::sm80, 256, 128, 8, 3};
  auto tiles = [](const KernelConfig &c) {
    return std::make_tuple(c.path, c.block_m, c.block_n, c.warps, c.stages);
  };
  for (const PrunedConfig &pruned : small.pruned)
    if (tiles(pruned.config) == tiles(big_tile)) {
      found = true;
      EXPECT_NE(pruned.reason.find("shared memory"), std::string::npos) << pruned.reason;
    }
  EXPECT_TRUE(found);
  EXPECT_EQ(small.configs.front(), default_forward_config(p, kSm90a, limit));
}

TEST(ForwardCandidates, RegisterModelPrunesWideTilesAtLargeHeadDims) {
  CandidateSet set = forward_candidates(problem_with(256), kSm90a, 0);
  for (const KernelConfig &c : set.configs) {
    if (c.path == KernelPath::sm80) {
      EXPECT_EQ(c.block_m / (16 * c.warps), 1) << describe(c);  // 32 rows x 256 would spill
    }
  }
  bool accumulators = false;
  for (const PrunedConfig &pruned : set.pruned)
    accumulators |= pruned.reason.find("accumulators") != std::string::npos;
  EXPECT_TRUE(accumulators);
}

TEST(RejectCompiled, SpillsAndOccupancy) {
  EXPECT_FALSE(reject_compiled(0, 1).has_value());
  EXPECT_FALSE(reject_compiled(64, 2).has_value());  // the limit itself is allowed
  auto spill = reject_compiled(65, 2);
  ASSERT_TRUE(spill.has_value());
  EXPECT_NE(spill->find("spills 65 B"), std::string::npos) << *spill;
  auto occupancy = reject_compiled(0, 0);
  ASSERT_TRUE(occupancy.has_value());
  EXPECT_NE(occupancy->find("no CTA fits"), std::string::npos) << *occupancy;
  EXPECT_TRUE(reject_compiled(8, 1, 0).has_value());
  EXPECT_FALSE(reject_compiled(8, 1, 8).has_value());
}

}  // namespace
}  // namespace flashjit
