// Shipped modifiers (include/flashjit/modifiers.h): common variants of
// attention as snippets, each with the aux fields it reads (set them with
// AuxValues by these names); the score_mods carry their score_mod_grad, so
// every one of them serves the backward too. Indices are positions within the sequence
// (q, k) and the query head h; b is the batch index.
#pragma once

#include "flashjit/modifiers.h"

namespace flashjit::mods {

// ALiBi: score + slopes[h] * (k - q). Aux: const float* slopes ([heads_q]).
// Written plainly: on the H200 it ran as fast or faster than its distance
// through flashjit::position_to_float, which trades the I2F per score for
// an integer and a float add (H200, 2026-12-03).
Modifiers alibi();

// A learned relative position bias: score + table[h][clamp(k - q, -max_distance,
// max_distance) + max_distance]. Aux: const float* table ([heads_q][2 *
// max_distance + 1]), int max_distance.
Modifiers relative_bias();

// Document masking of a packed sequence: query q sees key k of its own
// document. Aux: const int* doc_ids ([batch][seqlen], one id per token of
// each row, queries and keys alike), int seqlen (the row length).
Modifiers document_mask();

// Prefix-LM: the first `prefix` keys are visible to every query, the rest
// causally (k <= q). Aux: int prefix. The masks of (q, k) alone (this one,
// the sliding window and causal_mask) set mask_mod_qk_only: one block map
// for every batch and head.
Modifiers prefix_lm();

// A causal sliding window of `window` keys plus the first `sinks` keys
// (StreamingLLM's attention sinks): k <= q and (q - k < window or k < sinks).
// Aux: int window, int sinks.
Modifiers sliding_window_with_sinks();

// The built-in causal mask written as a modifier, k <= q (equal lengths):
// what a caller's own mask_mod can be checked against. (The softcap has no
// modifier twin: it is Problem::softcap, which the score policy applies
// before any score_mod.)
Modifiers causal_mask();

}  // namespace flashjit::mods
