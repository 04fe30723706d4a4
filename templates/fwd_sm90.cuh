// FlashAttention-3 style forward for sm_90a (TMA + wgmma + warp specialisation).
//
// Tiling. A work tile is (kBlockM query rows, query head, batch); kBlockM is
// 64 rows per consumer warpgroup: two of them (kBlockM = 128), or three
// (192) at head dim 64, whose short GEMMs leave a warpgroup's softmax only
// one other warpgroup's turn to hide under when there are two. Each
// consumer warpgroup owns 64 consecutive query rows and walks every visible
// K/V tile of kBlockN keys itself, so softmax statistics never cross
// warpgroups. Head dims tiled as 64, 128, 192 or 256; Q/K and V tiled apart.
//
// Work tiles. Every CTA loops over work tiles: in round k, CTA c takes tile
// k * gridDim.x + (c + k) % gridDim.x, query blocks fastest (heaviest first
// under a causal mask), so the CTAs running at once share K/V heads in L2.
// The producer runs ahead across work tiles: the next Q and K/V tiles load
// while the consumers finish the last P V and write O. The host picks the
// grid (FwdSm90Traits::persistent_grid): one CTA per SM (at most one fits)
// without a mask, and under a mask when there are about as many rounds as
// query blocks (the rotation then walks every CTA through the whole range
// of tile costs); else one CTA per work tile (one round each), which the
// hardware's block scheduler balances: causal tiles differ in cost up to
// the number of query blocks, and the static rotation lost 12% at causal 8k.
// A packed varlen batch on persistent CTAs numbers its tiles sequence by
// sequence without the empty ones, heaviest sequences first
// (fwd_sequence_order.cuh), and under a mask takes them from a
// counter the host zeroes (a CTA's next tile when it frees up): the
// producer passes each tile's index to the consumers in a slot beside its Q
// buffer.
//
// Warp roles. Warpgroup 0 is the producer: it gives registers back
// (setmaxnreg.dec) and one elected thread of its first warp issues every TMA
// load; its other warps exit (with e4m3 they transpose V tiles:
// fwd_sm90_v_transpose.cuh). Warpgroups 1.. are consumers (setmaxnreg.inc).
//
// Pipeline. Shared memory holds kQStages Q tiles (two where they fit, so
// the next work tile's Q loads while this one's is in use) and a ring of
// kStages K tiles and kStages V tiles, which runs on across work tiles.
// Every tile is a set of 128-byte swizzled column blocks of 64 elements
// (128 e4m3) ([col block][row][128 B], the layout TMA's SWIZZLE_128B writes and wgmma's
// 128-byte swizzle mode reads), so a head dim of 128 is two TMA boxes per
// tile. Barriers (mbarriers):
//   q_full[b]        Q buffer b landed (TMA transaction bytes),
//   q_empty[b]       every consumer warp is done with Q buffer b (one arrival
//                    per consumer warp, after its last S),
//   k_full[s], v_full[s]    stage s's K / V landed (TMA transaction bytes),
//   k_empty[s], v_empty[s]  every consumer warp is done with stage s's K (its
//                    S is complete) / V (its P V is), so the producer may
//                    refill it. K frees a P V earlier than V, which makes two
//                    stages nearly as deep as three and leaves the shared
//                    memory for the second Q buffer at d = 128.
//   e4m3: v_full/v_empty are V's staging tile landed / read by the
//   transposing warps; vt_full/vt_empty its V^T written / read by P V.
// Rows past seqlen are zero-filled by TMA; the mask handles the rest.
//
// Per K/V tile, per consumer warpgroup: S = Q K^T by wgmma with both operands
// in shared memory (SS, fp32 accumulators); the score policy
// (common/score_policy.cuh: softcap, a caller's score_mod and mask_mod on
// every score the sequence holds, the built-in mask element-wise only on
// tiles an edge or the seqlen_k tail cuts; fully masked tiles are never
// loaded), a mask_mod's work tiles walking only the key tiles its block map
// lists (fwd_block_map.cuh) and calling it only on the ones it does not
// show whole; the online softmax (common/online_softmax.cuh) in base 2
// with an unnormalised O; P converted to 16 bits in registers (e4m3 times
// 2^8) is the A operand of O += P V (RS wgmma, V read transposed from shared
// memory; e4m3 reads V^T K-major).
// The accumulator layout of m64nNk16 is the mma.m16n8 C fragment per warp
// (16 rows) repeated over N/8 column tiles, so P's registers are exactly
// the A fragments of P V, and the softmax is the sm80 kernel's.
//
// Intra-warpgroup overlap (kIntraOverlap: every head dim, but at 256 not
// with a caller's modifiers or idle-warpgroup skipping). Iteration t issues
// S(t+1) = Q K(t+1)^T and O += P(t) V(t) back to back, runs the softmax of
// S(t+1) while P V is in flight (wgmma.wait_group 1), then rescales O and
// replaces P. At head dim 256 the three register tiles (O 128, S 40, P 20
// at block_n 80) fit the consumers' 232 registers, as in FlashAttention-3;
// in sequence (S, softmax, P V), which the kernels left out keep, it ran
// 4-11% slower (H100, 2026-12-06). Overlapping work tiles as
// well (the next tile's first S issued with the last P V, its softmax under
// that, then the epilogue) measured 2-15% slower on the H200: the epilogue
// then sits between a warpgroup's turns and holds up the other's (H200,
// 2026-11-30: d=128 causal 1k 426.8 -> 389.8 TFLOP/s).
//
// Ping-pong (round robin with three). One named barrier per consumer
// warpgroup passes a turn from each to the next: a warpgroup issues its
// GEMMs only in its turn and hands the turn on once they are issued, so one's
// softmax runs under the others' GEMMs. The last warpgroup signals the first
// once up front (warpgroup 0 goes first) and warpgroup 0 consumes the extra
// signal at the end, so no barrier is left half-arrived.
//
// Parts. The work tiles and their key tiles come from the tile scheduler
// (common/fwd_scheduler.cuh: dense, persistent rotation, split-KV, a packed
// batch's compact numbering and counter), each
// sequence's lengths and the Q and K/V tiles' TMA coordinates from the
// sequence-info part (common/sequence.cuh: dense, a packed varlen batch
// whose sequences start at cu_seqlens offsets of one [total][heads][dim]
// tensor, per-sequence counts of a KV cache, pages through a page table,
// the producer then a whole warp whose lanes read a tile's page indices),
// the layout from FwdSm90Layout (common/fwd_sm90_layout.cuh, which the host twin compiles
// too), and O and the LSE leave through the epilogue
// (common/sm90_epilogue.cuh: straight from the fragments with 16-byte
// stores, or fp32 partials for the split-KV combine). Q's buffer is free as
// soon as the last S is computed. Packed GQA (kPackGqa): a warpgroup's rows
// are positions x the group's query heads, loaded by one 5-d TMA box.
//
// Parts: fwd_sm90_config.cuh (the constants and parts the prelude chooses,
// the barriers and the pipeline's positions), fwd_sm90_key_tiles.cuh (the
// K/V tiles a work tile walks), fwd_sm90_gemms.cuh (S = Q K^T, O += P V),
// fwd_sm90_score.cuh (modifiers and the built-in mask on S), and from
// common/ the scheduler (work tiles), the sequence and the epilogue (O and
// the LSE). The two roles stay in this kernel: moved into functions of
// their own (the producer's loop, the consumers') they changed the
// consumers' register allocation (d=128 0 -> 12-24 bytes spilled), where
// every part above leaves the SASS as it was (scripts/sass-compare.sh fwd).
#pragma once

#include "fwd_sm90_config.cuh"
#include "fwd_sm90_gemms.cuh"
#include "fwd_sm90_key_tiles.cuh"
#include "fwd_sm90_score.cuh"
#include "fwd_sm90_q_quantize.cuh"
#include "fwd_sm90_v_transpose.cuh"
#include "common/block_map.cuh"
#include "common/fwd_params.cuh"
#include "common/fwd_scheduler.cuh"
#include "common/online_softmax.cuh"
#include "common/ptx.cuh"
#include "common/score_policy.cuh"
#include "common/sequence.cuh"
#include "common/sm90.cuh"
#include "common/sm90_epilogue.cuh"
#include "common/sm90_wgmma.cuh"
#include "common/types.cuh"

extern "C" __global__ void __launch_bounds__(flashjit::fwd_sm90::kThreads, 1)
    flashjit_fwd_sm90(const flashjit::FwdParams p,
                      const __grid_constant__ flashjit::TmaDescriptor tma_q,
                      const __grid_constant__ flashjit::TmaDescriptor tma_k,
                      const __grid_constant__ flashjit::TmaDescriptor tma_v) {
  using namespace flashjit;
  using namespace flashjit::fwd_sm90;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 smem = (smem_address(smem_raw) + kSmemAlign - 1) & ~u32(kSmemAlign - 1);
  const Barriers bars(smem + kOffsetBarriers);

  // The next grid on the stream (the split-KV combine, or whatever follows)
  // may be scheduled now: it waits for this grid to complete before it reads
  // what this one writes.
  grid_dependents_launch();
  const int tid = threadIdx.x;
  const int warpgroup = tid / 128;

  Scheduler sched(p);  // per thread: the varlen cursor moves as it walks
  // Taken from the counter (on persistent CTAs, a packed batch or a
  // mask_mod's block map: tiles of uneven cost): the producer
  // takes each work tile and writes its index into the slot of the Q buffer
  // it loads it into, before the arrival that completes q_full; consumers
  // read it after their wait on q_full, and their release of the buffer
  // (q_empty) comes after that read, so the producer overwrites a slot only
  // once it is read. Past the last tile the producer writes -1 and arrives
  // without a load. A CTA's first tile is its own index; the counter counts
  // the ones taken after.
  // Under paged K/V the producer is a warp: its lane 0 takes each tile and
  // hands it to the other lanes.
  constexpr bool kTakesTiles = kVarlen || (kBlockMap && !kWarpProducer);
  const bool dynamic = kTakesTiles && p.tile_counter != nullptr && (!kVarlen || sched.compact);
  const KeyTileWalk walk{p, sched};
  // Under the counter, work tile j's index as its slot holds it (-1: none
  // left), read once its Q buffer is full, by the lane that releases the
  // buffer, so the read comes before the release in that thread's own order.
  auto slot_tile = [&](int j) {
    mbarrier_wait(bars.q_full(q_buffer_of(j)), q_parity_of(j));
    int w = 0;
    if (tid % 32 == 0) w = ld_shared_s32(tile_slot(smem, j));
    return __shfl_sync(0xffffffffu, w, 0);
  };

  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < kQStages; ++b) {
      mbarrier_init(bars.q_full(b), 1);
      // e4m3 under a counter, or quantizing Q: the spare producer warps read
      // the tile slots or the staging buffer too.
      mbarrier_init(bars.q_empty(b),
                    kConsumerWarps + (kFp8 && (dynamic || kQuantizeQ) ? kTransposeWarps : 0));
      if constexpr (kQuantizeQ) mbarrier_init(bars.qc_full(b), kTransposeWarps);
    }
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(bars.k_full(s), 1);
      mbarrier_init(bars.v_full(s), 1);
      mbarrier_init(bars.k_empty(s), kConsumerWarps);
      // e4m3: V's staging tile is the transposing warps' to release.
      mbarrier_init(bars.v_empty(s), kFp8 ? kTransposeWarps : kConsumerWarps);
      if constexpr (kFp8) {
        mbarrier_init(bars.vt_full(s), kTransposeWarps);
        mbarrier_init(bars.vt_empty(s), kConsumerWarps);
      }
    }
    fence_barrier_init();
  }
  __syncthreads();
  // Launched as a programmatic dependent: everything above overlapped the
  // tail of the grid before on the stream; every global read (Q/K/V, the
  // page table, the key counts) and write comes after its completion.
  grid_dependency_wait();

  // ---- producer ----------------------------------------------------------------
  if (warpgroup == 0) {
    setmaxnreg_dec<kProducerRegisters>();
    // `leader` issues every barrier operation and TMA load: the one elected
    // thread, or lane 0 of the warp that reads page indices.
    const bool producer = tid / 32 == 0 && (kWarpProducer || elect_one());
    const bool leader = !kWarpProducer || tid == 0;
    if (producer) {
      if (leader) {
        tma_prefetch_descriptor(&tma_q);
        tma_prefetch_descriptor(&tma_k);
        tma_prefetch_descriptor(&tma_v);
      }
      int kv_iter = 0;  // K/V tiles loaded so far, over all work tiles
      int w = static_cast<int>(blockIdx.x);  // the work tile taken (dynamic)
      auto next_tile = [&](int j, WorkTile &t) {
        if (!dynamic) return sched.next(p, j, t);
        if (j > 0) {
          int taken = 0;
          if (leader) taken = atomicAdd(p.tile_counter, 1);
          if constexpr (kWarpProducer) taken = __shfl_sync(0xffffffffu, taken, 0);
          w = static_cast<int>(gridDim.x) + taken;
        }
        return sched.at(p, w, t);
      };
      WorkTile tile;
      int j = 0;
      for (; next_tile(j, tile); ++j) {
        const int kv_head = sched.kv_head(p, tile);
        const Sequence seq(p, tile.batch);
        const TileSpan key_tiles = walk.key_tiles_of(tile, seq);
        const int entry_base = walk.entry_base_of(tile, key_tiles);
        // K (or V) of tile t in its stage, once the consumers have released
        // what the stage held kStages tiles back (a fresh barrier's parity-1
        // wait passes at once: the phase before its first). Paged, each lane
        // reads one box's page index before the wait, so its latency hides
        // under it.
        auto load_kv = [&](int t, bool v) {
          const int stage = stage_of(kv_iter + t);
          const int n0 = key_tile_index(walk.key_tile_entry(entry_base, t)) * kBlockN;
          int lane_page = seq.kv_outer;
          if constexpr (Sequence::kPaged) lane_page = seq.box_page(p, n0, tid % 32);
          const u32 full = v ? bars.v_full(stage) : bars.k_full(stage);
          const u32 dst =
              smem + (v ? kOffsetV : kOffsetK) + stage * (v ? kVTileBytes : kKTileBytes);
          // K's column blocks, or V's (fewer or more under unequal head dims),
          // of box `box` from page (or batch entry) `outer`.
          auto load_box = [&](int box, int outer) {
#pragma unroll
            for (int cb = 0; cb < (v ? kVColBlocks : kColBlocks); ++cb)
              tma_load_4d(dst + cb * kKVColBlockBytes + box * Sequence::kBoxRows * kRowBytes,
                          v ? &tma_v : &tma_k, full, cb * kColElems,
                          static_cast<int>(seq.box_row(n0, box)), kv_head, outer);
          };
          if constexpr (Sequence::kPaged) {
            // Every lane waits for the stage, and lane `box` issues its own
            // box's loads: a tile of 16-row pages is 8 boxes (16 loads at
            // d = 128), which one lane issued one after another on the
            // pipeline's critical path. The bytes may land before lane 0's
            // expect_tx (a phase's transaction count may go negative; it
            // completes only with lane 0's arrival too).
            mbarrier_wait(v ? bars.v_empty(stage) : bars.k_empty(stage),
                          parity_of(kv_iter + t) ^ 1);
            if (leader) mbarrier_arrive_expect_tx(full, v ? kVTileBytes : kKTileBytes);
            if (tid % 32 < Sequence::kBoxesPerTile) load_box(tid % 32, lane_page);
          } else if (leader) {
            mbarrier_wait(v ? bars.v_empty(stage) : bars.k_empty(stage),
                          parity_of(kv_iter + t) ^ 1);
            mbarrier_arrive_expect_tx(full, v ? kVTileBytes : kKTileBytes);
            static_assert(Sequence::kPaged || Sequence::kBoxesPerTile == 1, "one box per tile");
            load_box(0, lane_page);
          }
        };
        auto load_k = [&](int t) { load_kv(t, false); };
        auto load_v = [&](int t) {
          if constexpr (!kVFromK) load_kv(t, true);
        };
        // The first K tile before Q: its stage frees while the consumers
        // still work on the work tile before. With one Q buffer, whose
        // release comes only after their epilogue (or their last S), the
        // first V too; with two, Q's buffer is free already (the work tile
        // before last released it) and the first S needs Q before the first
        // P V needs V.
        if (key_tiles.count > 0) load_k(0);
        if (kQStages == 1 && key_tiles.count > 0) load_v(0);
        // Q of every work tile, even one that sees no key: the consumers wait
        // for each. Its buffer's first use passes at once; later ones wait for
        // every consumer warp to be done with the Q kQStages work tiles back.
        const int qb = q_buffer_of(j);
        if (leader) {
          mbarrier_wait(bars.q_empty(qb), q_parity_of(j) ^ 1);
          if (dynamic) st_shared_s32(tile_slot(smem, j), w);
          mbarrier_arrive_expect_tx(bars.q_full(qb), kQLoadedBytes);
        }
#pragma unroll
        for (int wg = 0; wg < kRowGroups && leader; ++wg)
#pragma unroll
          for (int cb = 0; cb < kQLoadedColBlocks; ++cb) {
            // (A quantized Q lands 16-bit, quantized in place.)
            const u32 dst =
                smem + qb * kQBufferBytes + wg * kQBufferWarpgroupBytes + cb * kQColBlockBytes;
            const int q0 = static_cast<int>(seq.q_row0) + tile.q0 + wg * kQRowsPerWg;
            // Packed: the box is [positions][the group's heads][64 columns]
            // of a [batch][seq][kv head][head in group][dim] view of Q.
            if constexpr (kPack > 1)
              tma_load_5d(dst, &tma_q, bars.q_full(qb), cb * kQColElems, 0, tile.head, q0,
                          seq.outer);
            else
              tma_load_4d(dst, &tma_q, bars.q_full(qb), cb * kQColElems, q0, tile.head,
                          seq.outer);
          }
        if (kQStages == 2 && key_tiles.count > 0) load_v(0);
        for (int t = 1; t < key_tiles.count; ++t) {
          load_k(t);
          load_v(t);
        }
        kv_iter += key_tiles.count;
      }
      // No tile left: the consumers, who take theirs from the slots, learn
      // it from the next one.
      if (dynamic && leader) {
        mbarrier_wait(bars.q_empty(q_buffer_of(j)), q_parity_of(j) ^ 1);
        st_shared_s32(tile_slot(smem, j), -1);
        mbarrier_arrive(bars.q_full(q_buffer_of(j)));
      }
    }
    if constexpr (kFp8) {
      // The transposing warps (fwd_sm90_v_transpose.cuh) walk the same
      // work tiles and key tiles as the consumers: each V tile, once landed
      // in its staging stage and once the consumers are done with the V^T
      // stage it goes to, is written there; V^T full, staging free.
      if (tid / 32 > 0) {
        const int twarp = tid / 32 - 1;
        const int lane = tid % 32;
        int kv_iter = 0;
        WorkTile tile;
        for (int j = 0;; ++j) {
          const int qb = q_buffer_of(j);
          if (dynamic) {
            const int w = slot_tile(j);
            if (!kQuantizeQ && lane == 0) mbarrier_arrive(bars.q_empty(qb));
            if (w < 0 || !sched.at(p, w, tile)) break;
          } else if (!sched.next(p, j, tile)) {
            break;
          }
          if constexpr (kQuantizeQ) {
            // The work tile's Q, once landed, quantized in place; the buffer
            // is the producer's again once the consumers are done with it
            // too (q_empty counts both).
            if (!dynamic) mbarrier_wait(bars.q_full(qb), q_parity_of(j));
            quantize_q_tile(smem + qb * kQBufferBytes,
                            smem + kOffsetQScales + qb * kLayout.q_scale_bytes(), twarp, lane);
            fence_proxy_async();  // the e4m3 Q is read by wgmma
            __syncwarp();
            if (lane == 0) {
              mbarrier_arrive(bars.qc_full(qb));
              mbarrier_arrive(bars.q_empty(qb));
            }
          }
          const Sequence seq(p, tile.batch);
          const int num_tiles = walk.key_tiles_of(tile, seq).count;
          for (int t = 0; t < num_tiles; ++t) {
            const int it = kv_iter + t;
            const int stage = stage_of(it);
            mbarrier_wait(bars.v_full(stage), parity_of(it));
            mbarrier_wait(bars.vt_empty(stage), parity_of(it) ^ 1);
            transpose_v_tile(smem + kOffsetV + stage * kVTileBytes,
                             smem + kOffsetVt + stage * kLayout.vt_tile_bytes(), twarp, lane);
            // V^T is read by wgmma, through the async proxy.
            fence_proxy_async();
            __syncwarp();
            if (lane == 0) {
              mbarrier_arrive(bars.vt_full(stage));
              mbarrier_arrive(bars.v_empty(stage));
            }
          }
          kv_iter += num_tiles;
        }
      }
    }
    return;
  }
  setmaxnreg_inc<kConsumerRegisters>();
  const int cwg = warpgroup - 1;      // consumer warpgroup index
  // Its 64 rows, and its half of the columns where they are split (0 else).
  const int row_group = cwg / kColumnSplit;
  const int half = cwg % kColumnSplit;
  const int ctid = tid % 128;         // thread within it
  const int warp = ctid / 32;         // warp within it: rows 16*warp..
  const int lane = tid % 32;
  const int group = lane / 4;         // fragment row (and row + 8)
  const int quad_lane = lane % 4;     // fragment column pair

  // Descriptor bases from run-time shared addresses (see common/sm90.cuh).
  const u64 q_desc0 = smem_descriptor_sw128(smem + row_group * kQBufferWarpgroupBytes, 16, 1024);
  auto q_desc_of = [&](int j) { return q_desc0 + ((q_buffer_of(j) * kQBufferBytes) >> 4); };
  const u64 k_desc0 = smem_descriptor_sw128(smem + kOffsetK, 16, 1024);
  // P V's B: V read MN-major, or e4m3's V^T K-major (as K).
  // Split columns: the warpgroup's half of V's column blocks.
  const u64 v_desc0 =
      kFp8 ? smem_descriptor_sw128(smem + kOffsetVt, 16, 1024)
           : smem_descriptor_sw128(smem + (kVFromK ? kOffsetK : kOffsetV) +
                                       half * kVColBlocksPerWarpgroup * kKVColBlockBytes,
                                   kKVColBlockBytes, 1024);
  // The first k-step of the warpgroup's S (its half of Q's and K's columns).
  const int qk_step0 = half * kQKStepsPerWarpgroup;

  float acc_o[kORegisters];
  // The thread's rows `group` and `group + 8` of its warp (common/online_softmax.cuh).
  OnlineSoftmax<1> stats;
  // Under a score_mod, S leaves apply_modifiers() in the softmax's natural
  // units (the snippet's result, not scaled back), so the softmax and the
  // LSE scale by log2(e) alone: one multiply per score fewer.
  const float base_scale_log2 = Modifiers::kScore ? 1.4426950408889634f : p.softmax_scale_log2;
  // e4m3: the work tile's descales (below); the scale is per work tile.
  constexpr bool kDescaleScores = kSoftcap || Modifiers::kScore;
  float scale_log2 = base_scale_log2;
  float qk_descale = 1.f, v_descale = 1.f;
  float q_row_scale[2] = {1.f, 1.f};  // a quantized Q's, of the thread's two rows
  // The fragment accessors of S and O for the shared softmax: one m16 row
  // tile per warp, element i of column tile nt at 4 nt + i.
  auto s_at = [](float (&acc_s)[kSRegisters]) {
    return [&acc_s](int, int nt, int i) -> float & { return acc_s[4 * nt + i]; };
  };
  auto o_at = [&acc_o](int, int nt, int i) -> float & { return acc_o[4 * nt + i]; };

  // Turn-taking between the consumer warpgroups (ping-pong, round robin with
  // three): a warpgroup issues its GEMMs only in its turn and hands the turn
  // to the next once they are issued, so its softmax overlaps the others'
  // GEMMs. Warpgroup 0 starts: the last signals it once up front. All walk
  // the same K/V tiles of every work tile, so the turns stay in step across
  // work tiles. A warpgroup cannot signal the next twice before it has
  // taken that signal: its own next turn waits for the whole round.
  auto take_turn = [&] {
    if constexpr (kPingPong) named_barrier_sync(kBarrierPingPong + cwg, 2 * 128);
  };
  auto pass_turn = [&] {
    if constexpr (kPingPong)
      named_barrier_arrive(kBarrierPingPong + (cwg + 1) % kConsumerWarpgroups, 2 * 128);
  };
  if constexpr (kPingPong) {
    if (cwg == kConsumerWarpgroups - 1) named_barrier_arrive(kBarrierPingPong + 0, 2 * 128);
  }


  // Softcap, modifiers, mask and online softmax of the S tile of keys
  // [n0, n0 + kBlockN) for the warpgroup's 64 query rows from wg_m0: S
  // becomes unnormalised P in place; `correction` is the factor O must be
  // scaled by (applied by the caller once the previous P V is complete).
  // acc_s[4*nt + 2*h + c] is row (group + 8h), column 8nt + 2*quad_lane + c.
  auto softmax = [&](float (&acc_s)[kSRegisters], const WorkTile &tile, const Sequence &seq,
                     int wg_m0, int entry, const RowRuns &runs, float (&correction)[2]) {
    const int n0 = key_tile_index(entry) * kBlockN;
    const int seqlen_k = seq.seqlen_k;
    const i64 offset = seq.offset;
    if constexpr (kQuantizeQ) {
      // Element i is row (i / 2) % 2 of the thread's two.
#pragma unroll
      for (int i = 0; i < kSRegisters; ++i)
        acc_s[i] *= q_row_scale[(i / 2) % 2] * (kDescaleScores ? qk_descale : 1.f);
    } else if constexpr (kFp8 && kDescaleScores) {
#pragma unroll
      for (int i = 0; i < kSRegisters; ++i) acc_s[i] *= qk_descale;
    }
#pragma unroll
    for (int i = 0; i < kSRegisters; ++i) acc_s[i] = Score::softcap(acc_s[i], p);
    // A partial tile of mask_mod's whose rows are runs is masked with the
    // built-in mask below, its bounds narrowed to the runs, not by mask_mod.
    const bool runs_tile = kRowRuns && (entry & kBlockMapRuns);
    if constexpr (Modifiers::kScore || Modifiers::kMask)
      apply_modifiers(acc_s, p, tile, seq, wg_m0, n0,
                      kBlockMap && ((entry & kBlockMapFull) || runs_tile), warp, group, quad_lane);
    // Mask only tiles an edge or the seqlen_k tail cuts (for this warpgroup's
    // rows), and mask_mod's run tiles.
    if (runs_tile || Score::tile_is_cut(p, seqlen_k, wg_m0, kQRowsPerWg, n0, kBlockN, offset))
      mask_cut_tile(acc_s, p, seqlen_k, offset, wg_m0, n0, runs_tile, runs);
    stats.update<kSTiles, kPExponent>(s_at(acc_s), scale_log2,
                          [&](int r, float factor) { correction[r] = factor; });
  };

  // O *= the softmax's correction of each of the thread's two rows.
  // Split columns: 128 of O's registers a thread, rescaled every 32 keys.
  // Where no row of the warp's max moved (every factor exactly 1, as
  // exp2(0) is: most tiles past the first few of a row) the warp skips it.
  auto rescale_o = [&](const float (&correction)[2]) {
    if constexpr (kColumnSplit == 2)
      if (__all_sync(0xffffffffu, correction[0] == 1.f && correction[1] == 1.f)) return;
    OnlineSoftmax<1>::rescale<kOTiles>(o_at, correction);
  };


  // Every warp's release of K/V tile `it`'s K or V once its MMAs have read it.
  auto release_k = [&](int it) {
    if constexpr (!kVFromK)  // else after P V (release_v)
      if (lane == 0) mbarrier_arrive(bars.k_empty(stage_of(it)));
  };
  auto release_v = [&](int it) {
    if (lane == 0) mbarrier_arrive(bars.pv_empty(stage_of(it)));
  };
  // Every consumer warp's release of work tile j's Q buffer.
  auto release_q = [&](int j) {
    if (lane == 0) mbarrier_arrive(bars.q_empty(q_buffer_of(j)));
  };

  // Split columns: the warpgroup's partial S of K/V tile `it` (over its half
  // of the columns) to its partner, and the partner's added, so that both
  // hold the same S (a + b is b + a, bit for bit) and run the same softmax.
  // The buffer alternates per K/V tile where there are two: a warpgroup
  // writes tile it + 2's only after the barrier of tile it + 1, which its
  // partner reaches after reading tile it's. With one, a second barrier
  // keeps the next write behind the partner's read.
  auto exchange_s = [&](float (&acc_s)[kSRegisters], int it) {
    if constexpr (kColumnSplit == 2) {
      const int buffer = kSExchangeBuffers == 2 ? (it & 1) : 0;
      const u32 base = smem + kOffsetSExchange + buffer * kLayout.s_exchange_buffer_bytes() +
                       4 * ctid;
      const u32 mine = base + cwg * kLayout.s_exchange_warpgroup_bytes();
      const u32 theirs = base + (cwg ^ 1) * kLayout.s_exchange_warpgroup_bytes();
#pragma unroll
      for (int i = 0; i < kSRegisters; ++i) st_shared_f32(mine + 4 * 128 * i, acc_s[i]);
      named_barrier_sync(kBarrierSExchange + row_group, 2 * 128);
#pragma unroll
      for (int i = 0; i < kSRegisters; ++i) acc_s[i] += ld_shared_f32(theirs + 4 * 128 * i);
      if constexpr (kSExchangeBuffers == 1)
        named_barrier_sync(kBarrierSExchange + row_group, 2 * 128);
    }
  };

  // S = Q K^T of K/V tile `it` against work tile j's Q, in this warpgroup's
  // turn, waited for; the K stage is released.
  auto s_alone = [&](float (&acc_s)[kSRegisters], int j, int it) {
    mbarrier_wait(bars.k_full(stage_of(it)), parity_of(it));
    take_turn();
    issue_s(acc_s, q_desc_of(j), k_desc0, stage_of(it), qk_step0);
    pass_turn();
    wgmma_wait<0>();
    wgmma_fence_operands(acc_s);
    release_k(it);
    exchange_s(acc_s, it);
  };
  // O += P V of K/V tile `it` in this warpgroup's turn, waited for; the V
  // stage is released.
  auto pv_alone = [&](u32 (&p_frag)[kPVSteps][4], int it) {
    mbarrier_wait(bars.pv_full(stage_of(it)), parity_of(it));
    take_turn();
    issue_pv(acc_o, p_frag, v_desc0, stage_of(it));
    pass_turn();
    wgmma_wait<0>();
    wgmma_fence_operands(acc_o);
    release_v(it);
  };
  // One turn of S(it_s) = Q_j K(it_s)^T and O += P V(it_pv), issued back to
  // back; returns once S is complete (the K stage released), P V may still
  // run (finish_pv waits for it).
  auto s_and_pv = [&](float (&acc_s)[kSRegisters], int j, int it_s, u32 (&p_frag)[kPVSteps][4],
                      int it_pv) {
    mbarrier_wait(bars.k_full(stage_of(it_s)), parity_of(it_s));
    mbarrier_wait(bars.pv_full(stage_of(it_pv)), parity_of(it_pv));
    take_turn();
    issue_s(acc_s, q_desc_of(j), k_desc0, stage_of(it_s), qk_step0);
    issue_pv(acc_o, p_frag, v_desc0, stage_of(it_pv));
    pass_turn();
    wgmma_wait<1>();
    wgmma_fence_operands(acc_s);
    release_k(it_s);
    exchange_s(acc_s, it_s);
  };
  auto finish_pv = [&](int it_pv) {
    wgmma_wait<0>();
    wgmma_fence_operands(acc_o);
    release_v(it_pv);
  };

  // O and the LSE of the work tile, or this split's partials
  // (common/sm90_epilogue.cuh).
  auto write_o = [&](const WorkTile &tile, const Sequence &seq, int wg_m0) {
    if constexpr (kFp8) {
      // O in V's true units. P went into P V as 2^kPExponent P, and so into
      // the row sum: both scale back by 2^-kPExponent (exact), so the LSE,
      // a sink's weight and a split's partial come out as in 16 bits, for
      // any descale (0 included).
      constexpr float kPScale = 1.f / static_cast<float>(1 << kPExponent);
      const float o_scale = v_descale * kPScale;
#pragma unroll
      for (int i = 0; i < kORegisters; ++i) acc_o[i] *= o_scale;
      OnlineSoftmax<1> true_stats = stats;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        true_stats.row_sum[h] *= kPScale;
        if constexpr (Modifiers::kScoreSlope && kPack == 1)
          true_stats.row_max[h] -= Modifiers::score_slope(tile.batch, tile.head, p.aux) *
                                   static_cast<float>(warp * 16 + group + h * 8);
      }
      Epilogue::store(p, tile, seq, wg_m0, warp, group, quad_lane, acc_o, true_stats, scale_log2,
                      half * kOColumns);
    } else if constexpr (Modifiers::kScoreSlope && kPack == 1) {
      // The rows' own bias, left out of the softmax (apply_modifiers): the max back
      // in the true logits' units, for the LSE and a sink.
      const float slope = Modifiers::score_slope(tile.batch, tile.head, p.aux);
      OnlineSoftmax<1> true_stats = stats;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        true_stats.row_max[h] -= slope * static_cast<float>(warp * 16 + group + h * 8);
      Epilogue::store(p, tile, seq, wg_m0, warp, group, quad_lane, acc_o, true_stats, scale_log2,
                      half * kOColumns);
    } else {
      Epilogue::store(p, tile, seq, wg_m0, warp, group, quad_lane, acc_o, stats, scale_log2,
                      half * kOColumns);
    }
  };

  auto reset_o = [&] {
#pragma unroll
    for (int i = 0; i < kORegisters; ++i) acc_o[i] = 0.f;
  };

  float acc_s[kSRegisters];
  u32 p_frag[kPVSteps][4];
  float correction[2];
  int kv_iter = 0;  // K/V tiles consumed so far, over all work tiles

  // A warpgroup none of whose rows the sequence holds (a packed batch's
  // decode step: one query, the whole tile but its first rows idle) issues
  // no GEMM: it walks work tile j's K/V tiles taking and passing the same
  // turns as a working warpgroup (num_tiles + 1 with the intra-warpgroup
  // overlap, 2 per tile without) and releasing each stage once it is full
  // (an early release would count toward the phase of the tile kStages
  // before). Its loop is its own, so the working loop's code is unchanged;
  // its epilogue writes nothing (every row lies past the sequence).
  auto idle_walk = [&](int j, int num_tiles) {
    auto turn = [&] {
      take_turn();
      pass_turn();
    };
    for (int t = 0; t < num_tiles; ++t) {
      const int it = kv_iter + t;
      mbarrier_wait(bars.k_full(stage_of(it)), parity_of(it));
      if (kIntraOverlap && t > 0) mbarrier_wait(bars.pv_full(stage_of(it - 1)), parity_of(it - 1));
      turn();
      release_k(it);
      if (kIntraOverlap && t > 0) release_v(it - 1);
      if (!kIntraOverlap) {
        if (t + 1 == num_tiles) release_q(j);
        mbarrier_wait(bars.pv_full(stage_of(it)), parity_of(it));
        turn();
        release_v(it);
      }
    }
    if (kIntraOverlap) {
      const int last = kv_iter + num_tiles - 1;
      release_q(j);
      mbarrier_wait(bars.pv_full(stage_of(last)), parity_of(last));
      turn();
      release_v(last);
    }
  };
  auto next_tile = [&](int j, WorkTile &t) {
    if (!dynamic) return sched.next(p, j, t);
    const int w = slot_tile(j);  // before release_q's arrival
    return w >= 0 && sched.at(p, w, t);
  };
  WorkTile tile;
  for (int j = 0; next_tile(j, tile); ++j) {
    const int wg_m0 = tile.q0 + row_group * kQRowsPerWg;  // the warpgroup's first query position
    const Sequence seq(p, tile.batch);
    const TileSpan key_tiles = walk.key_tiles_of(tile, seq);
    const int num_tiles = key_tiles.count;
    const int entry_base = walk.entry_base_of(tile, key_tiles);
    auto entry_of = [&](int t) { return walk.key_tile_entry(entry_base, t); };
    reset_o();
    stats.reset();
    if constexpr (kFp8) {
      // The (batch, KV head)'s descales: Q K^T's into the softmax's scale
      // (or onto S, where softcap or a score_mod must see true scores), V's
      // into O's finish.
      const i64 at = tile.batch * p.descale_batch_stride +
                     sched.kv_head(p, tile) * p.descale_head_stride;
      // (A quantized Q's scales are its rows', read below.)
      qk_descale = (kQuantizeQ ? 1.f : p.q_descale[at]) * p.k_descale[at];
      v_descale = p.v_descale[at];
      // A descale of 0 (an all-zero tensor's amax) makes every score 0:
      // uniform weights. Folded into the scale it would turn a masked
      // score's -inf into NaN (-inf * 0), so the scale stays at least the
      // smallest normal float, which leaves every finite score at 0 after
      // the scale and -inf at -inf.
      if constexpr (!kDescaleScores)
        scale_log2 = base_scale_log2 * fmaxf(qk_descale, 1.17549435e-38f);
    }
    mbarrier_wait(kQuantizeQ ? bars.qc_full(q_buffer_of(j)) : bars.q_full(q_buffer_of(j)),
                  q_parity_of(j));
    if constexpr (kQuantizeQ) {
      // The thread's two rows' scales (fwd_sm90_q_quantize.cuh).
      const u32 scales = smem + kOffsetQScales + q_buffer_of(j) * kLayout.q_scale_bytes() +
                         4 * (row_group * 64 + warp * 16 + group);
      q_row_scale[0] = ld_shared_f32(scales);
      q_row_scale[1] = ld_shared_f32(scales + 4 * 8);
    }

    if (num_tiles == 0) {
      release_q(j);  // no key visible: Q was not read
    } else if (kSkipIdleWarpgroups && wg_m0 >= seq.seqlen_q) {
      idle_walk(j, num_tiles);
    } else if (!kIntraOverlap) {
      // Without overlap (head dim 256: S(t+1), P(t) and O do not fit in the
      // register budget together): S, softmax, then P V, one tile at a time.
      // Each GEMM is issued in its own turn, so with ping-pong the turns
      // alternate S0 S1 PV0 PV1 and one warpgroup's softmax runs under the
      // other's GEMMs.
      for (int t = 0; t < num_tiles; ++t) {
        const int entry = entry_of(t);
        const RowRuns runs = row_runs_of(p, tile, wg_m0, entry, warp, group);
        s_alone(acc_s, j, kv_iter + t);
        softmax(acc_s, tile, seq, wg_m0, entry, runs, correction);
        rescale_o(correction);
        to_p(acc_s, p_frag);
        if (t + 1 == num_tiles) release_q(j);  // its last S is done
        pv_alone(p_frag, kv_iter + t);
      }
    } else {
      // Intra-warpgroup overlap: iteration t issues S(t+1) = Q K(t+1)^T and
      // then O += P(t) V(t) back to back, computes the softmax of S(t+1)
      // while P V runs, and only then rescales O and replaces P.
      // Under a block map each entry is read a tile ahead and its runs
      // before the GEMMs of its S: neither load waits after the S does.
      // Not with three consumer warpgroups (see kRowRuns): there the entry
      // is read after the S, as it was.
      constexpr bool kAhead = kBlockMap && kConsumerWarpgroups < 3;
      const int first = entry_of(0);
      const RowRuns first_runs = row_runs_of(p, tile, wg_m0, first, warp, group);
      int upcoming = kAhead && num_tiles > 1 ? entry_of(1) : 0;
      s_alone(acc_s, j, kv_iter);
      softmax(acc_s, tile, seq, wg_m0, first, first_runs, correction);  // O is still 0
      to_p(acc_s, p_frag);
      // The last tile is peeled off: with a fixed number of commit groups per
      // iteration ptxas can tell that wait<1> completes S, and keeps the wgmmas
      // asynchronous (a conditional S issue made it serialise them, C7514).
      for (int t = 0; t + 1 < num_tiles; ++t) {
        int entry = 0;
        RowRuns runs{{0u, 0u}};
        if constexpr (kAhead) {
          entry = upcoming;
          if (t + 2 < num_tiles) upcoming = entry_of(t + 2);
          runs = row_runs_of(p, tile, wg_m0, entry, warp, group);
        }
        s_and_pv(acc_s, j, kv_iter + t + 1, p_frag, kv_iter + t);
        if constexpr (!kAhead) {
          entry = entry_of(t + 1);
          runs = row_runs_of(p, tile, wg_m0, entry, warp, group);
        }
        softmax(acc_s, tile, seq, wg_m0, entry, runs, correction);
        finish_pv(kv_iter + t);
        rescale_o(correction);
        to_p(acc_s, p_frag);
      }
      // Every S of the work tile is done: the next Q may load under the last
      // P V and the epilogue.
      release_q(j);
      pv_alone(p_frag, kv_iter + num_tiles - 1);
    }
    kv_iter += num_tiles;
    write_o(tile, seq, wg_m0);  // no key visible: O = 0, LSE = +inf
  }
  if constexpr (kPingPong) {
    // Balance the turns: the last warpgroup's up-front signal leaves
    // warpgroup 0 one signal ahead; consuming it leaves no barrier
    // half-arrived at exit.
    if (cwg == 0) named_barrier_sync(kBarrierPingPong + 0, 2 * 128);
  }
}
