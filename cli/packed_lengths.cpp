#include "cli/packed_lengths.h"

#include <random>

namespace flashjit::cli {

PackedBatch packed_lengths(const ParsedProblem &parsed, uint64_t seed) {
  if (!parsed.seqlens_q.empty()) return {parsed.seqlens_q, parsed.seqlens_k};
  const Problem &p = parsed.problem;
  std::mt19937_64 rng(seed * 7919 + 17);
  PackedBatch out;
  const bool self = p.seqlen_q == p.seqlen_k;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t lq = std::uniform_int_distribution<int64_t>(1, p.seqlen_q)(rng);
    out.seqlens_q.push_back(lq);
    out.seqlens_k.push_back(self ? lq : std::uniform_int_distribution<int64_t>(1, p.seqlen_k)(rng));
  }
  // One sequence has the longest lengths, so the problem's maxima are met.
  const size_t longest = std::uniform_int_distribution<size_t>(0, out.seqlens_q.size() - 1)(rng);
  out.seqlens_q[longest] = p.seqlen_q;
  out.seqlens_k[longest] = p.seqlen_k;
  return out;
}

}  // namespace flashjit::cli
