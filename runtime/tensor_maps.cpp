#include "runtime/tensor_maps.h"

#include <cstdint>

#include "runtime/cuda_driver.h"
#include "runtime/tensor_checks.h"
#include "templates/common/bwd_sm90_layout.cuh"
#include "templates/common/fwd_sm90_layout.cuh"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit {
namespace {

// Box inner extent: 128 bytes (64 16-bit elements, 128 e4m3), the most a
// 128-byte swizzle allows and exactly one swizzle row of the kernel's tiles
// (the backward's may be 32 columns, 64-byte swizzled: encode's
// box_columns).
int box_columns_of(DType dtype) { return FwdSm90Layout::kRowBytes / element_bytes(dtype); }
// Query rows per TMA box: one consumer warpgroup's rows (fwd_sm90.cuh).
constexpr int kQBoxRows = FwdSm90Layout::kWarpgroupRows;

// The L2 promotion of a map's loads. The forward's maps take none: with
// 256-byte promotion a K/V box's 128-byte rows fetch their neighbours too,
// a quarter of the L2 sectors hit, and decode streamed the cache at 87% of
// HBM's peak where cuDNN, missing every sector, reached 93% (ncu, 16 x 32k);
// without it, decode's geometric mean 0.998 -> 1.015x cuDNN and a page-64
// cache 0.92-0.95 -> 0.97-0.99x contiguous, the training forward unchanged
// (H200, 2026-12-02). The backward's keep 256 bytes.
constexpr CUtensorMapL2promotion kForwardPromotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
constexpr CUtensorMapL2promotion kBackwardPromotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;

// A stride TMA accepts for a dimension: a multiple of 16 bytes below 2^40.
// A dimension of extent 1 is never stepped over, so any stride serves there;
// callers (PyTorch) give such dimensions arbitrary strides, which TMA would
// reject, so they are replaced by the row size.
uint64_t tma_stride(int64_t elements, int64_t extent, int head_dim, int bytes) {
  if (extent <= 1) return static_cast<uint64_t>(head_dim) * bytes;
  return static_cast<uint64_t>(elements) * bytes;
}

// The inputs of one encode, which determine its map: a warm call passes the
// same ones as the call before (a decode step's cache, PyTorch's caching
// allocator handing back the same blocks), and the driver's encode took
// ~0.25 us a map interleaved with launches on the H200's host (HostCost).
struct EncodeInputs {
  CUtensorMapDataType type;
  cuuint32_t rank;
  const void *data;
  cuuint64_t dims[5];
  cuuint64_t byte_strides[4];
  cuuint32_t box[5];
  CUtensorMapL2promotion promotion;
  CUtensorMapSwizzle swizzle;
  bool operator==(const EncodeInputs &o) const {
    if (type != o.type || rank != o.rank || data != o.data || promotion != o.promotion ||
        swizzle != o.swizzle)
      return false;
    for (cuuint32_t i = 0; i < rank; ++i)
      if (dims[i] != o.dims[i] || box[i] != o.box[i] ||
          (i + 1 < rank && byte_strides[i] != o.byte_strides[i]))
        return false;
    return true;
  }
};

// The maps this thread encoded last (a call encodes 3-5), replaced round
// robin: a lookup compares a few words, and no lock is taken.
class RecentMaps {
 public:
  const CUtensorMap *find(const EncodeInputs &in) const {
    for (const Entry &e : entries_)
      if (e.used && e.inputs == in) return &e.map;
    return nullptr;
  }
  void insert(const EncodeInputs &in, const CUtensorMap &map) {
    entries_[next_] = {true, in, map};
    next_ = (next_ + 1) % kEntries;
  }

 private:
  static constexpr int kEntries = 8;
  struct Entry {
    bool used = false;
    EncodeInputs inputs{};
    CUtensorMap map{};
  };
  Entry entries_[kEntries];
  int next_ = 0;
};

// A tiled map of `rank` dims (innermost first; `byte_strides` for dims 1..)
// read in boxes of `box`, swizzled (128 bytes unless told); out-of-bounds
// elements read as zeros. The error names the tensor (`what`) and every
// value passed.
llvm::Expected<CUtensorMap> encode_tiled(
    const CudaDriver &cu, llvm::StringRef what, CUtensorMapDataType type, const void *data,
    cuuint32_t rank, const cuuint64_t *dims, const cuuint64_t *byte_strides,
    const cuuint32_t *box, CUtensorMapL2promotion promotion,
    CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  thread_local RecentMaps recent;
  EncodeInputs inputs{type, rank, data, {}, {}, {}, promotion, swizzle};
  for (cuuint32_t i = 0; i < rank && i < 5; ++i) {
    inputs.dims[i] = dims[i];
    inputs.box[i] = box[i];
    if (i + 1 < rank) inputs.byte_strides[i] = byte_strides[i];
  }
  if (rank <= 5) {
    if (const CUtensorMap *hit = recent.find(inputs)) return *hit;
  }
  CUtensorMap map;
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUresult r = cu.cuTensorMapEncodeTiled(
      &map, type, rank, const_cast<void *>(data), dims, byte_strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);  // NONE: out-of-bounds elements read as zeros
  if (llvm::Error e = cuda_check(r, "cuTensorMapEncodeTiled")) {
    std::string dims_text, strides_text, box_text;
    llvm::raw_string_ostream d(dims_text), s(strides_text), b(box_text);
    for (cuuint32_t i = 0; i < rank; ++i) {
      d << (i ? "x" : "") << dims[i];
      b << (i ? "x" : "") << box[i];
      if (i + 1 < rank) s << (i ? " " : "") << byte_strides[i];
    }
    d.flush();
    s.flush();
    b.flush();
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("TMA tensor map of {0} (address {1}, dims {2} innermost first, byte "
                      "strides {3}, box {4}): {5}",
                      what, data, dims_text, strides_text, box_text,
                      llvm::toString(std::move(e)))
            .str());
  }
  if (rank <= 5) recent.insert(inputs, map);
  return map;
}

CUtensorMapDataType tma_type(DType dtype) {
  switch (dtype) {
    case DType::bf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::fp16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::e4m3: return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // TMA moves bytes
  }
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

// A [batch, seqlen, heads, dim] tensor as the 4-d map (dim, seqlen, heads,
// batch) with the caller's strides, in boxes of `box_columns` (64: 128-byte
// swizzled, 32: 64-byte) x `box_rows`.
llvm::Expected<CUtensorMap> encode(const CudaDriver &cu, const char *name, DType dtype,
                                   const void *data, int head_dim, int64_t seqlen, int64_t heads,
                                   int64_t batch, const TensorStrides &strides, int box_rows,
                                   CUtensorMapL2promotion promotion, int box_columns = 0) {
  const int bytes = element_bytes(dtype);
  if (box_columns == 0) box_columns = box_columns_of(dtype);
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(seqlen),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t byte_strides[3] = {tma_stride(strides.seq, seqlen, head_dim, bytes),
                                      tma_stride(strides.head, heads, head_dim, bytes),
                                      tma_stride(strides.batch, batch, head_dim, bytes)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_columns),
                             static_cast<cuuint32_t>(box_rows), 1, 1};
  return encode_tiled(cu, name, tma_type(dtype), data, 4, dims, byte_strides, box, promotion,
                      box_columns == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B);
}

// Q with packed GQA (fwd_sm90.cuh, kPackGqa): a 5-d view [batch][seq][kv
// head][head in group][dim] whose box is [positions][the group's `ratio`
// heads][64 columns], so one box fills a warpgroup's rows head fastest.
llvm::Expected<CUtensorMap> encode_packed_q(const CudaDriver &cu, DType dtype, const void *data,
                                            int head_dim, int64_t seqlen, int64_t heads_q,
                                            int64_t batch, const TensorStrides &strides,
                                            int ratio) {
  const int64_t heads_kv = heads_q / ratio;
  const int bytes = element_bytes(dtype);
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(ratio),
                              static_cast<cuuint64_t>(heads_kv), static_cast<cuuint64_t>(seqlen),
                              static_cast<cuuint64_t>(batch)};
  const cuuint64_t byte_strides[4] = {tma_stride(strides.head, ratio, head_dim, bytes),
                                      tma_stride(strides.head * ratio, heads_kv, head_dim, bytes),
                                      tma_stride(strides.seq, seqlen, head_dim, bytes),
                                      tma_stride(strides.batch, batch, head_dim, bytes)};
  const cuuint32_t box[5] = {static_cast<cuuint32_t>(box_columns_of(dtype)), static_cast<cuuint32_t>(ratio), 1,
                             static_cast<cuuint32_t>(kQBoxRows / ratio), 1};
  return encode_tiled(cu, "q packed by its group's heads (dims: the group second)", tma_type(dtype),
                      data, 5, dims, byte_strides, box, kForwardPromotion);
}

}  // namespace

llvm::Expected<ForwardTensorMaps> make_forward_tensor_maps(const KernelSpec &spec,
                                                           const Problem &p,
                                                           const ForwardArgs &args) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  ForwardTensorMaps maps;
  // A packed varlen batch is one [total][heads][d] tensor: a batch of one
  // whose rows the kernel offsets per sequence (common/sequence.cuh).
  const auto [outer, q_rows] = query_extent(p, args.varlen);
  auto q = spec.pack_gqa > 1
               ? encode_packed_q(*driver, p.dtype, args.q, spec.head_dim_qk, q_rows, p.heads_q,
                                 outer, args.q_strides, spec.pack_gqa)
               : encode(*driver, "q", p.dtype, args.q, spec.head_dim_qk, q_rows, p.heads_q,
                        outer, args.q_strides, kQBoxRows, kForwardPromotion);
  if (!q) return q.takeError();
  // Paged: [num_pages][page_size][heads_kv][d], read in boxes that never
  // cross a page (common/sequence.cuh).
  const auto [kv_outer, kv_rows] = forward_key_extent(p, args);
  const int box_rows = kv_box_rows(spec.page_size, spec.config.block_n);
  auto k = encode(*driver, "k", kv_element(p), args.k, spec.head_dim_qk, kv_rows, p.heads_kv,
                  kv_outer, args.k_strides, box_rows, kForwardPromotion);
  if (!k) return k.takeError();
  auto v = encode(*driver, "v", kv_element(p), args.v, spec.head_dim_v, kv_rows, p.heads_kv,
                  kv_outer, args.v_strides, box_rows, kForwardPromotion);
  if (!v) return v.takeError();
  maps.q = *q;
  maps.k = *k;
  maps.v = *v;
  return maps;
}

llvm::Expected<BackwardTensorMaps> make_backward_tensor_maps(const KernelSpec &spec,
                                                             const Problem &p,
                                                             const BackwardArgs &args) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const int block_m = spec.config.block_m, block_n = spec.config.block_n;
  // A packed varlen batch is one [total][heads][d] tensor (as the forward's).
  const auto [q_outer, q_rows] = query_extent(p, args.varlen);
  const auto [k_outer, k_rows] = key_extent(p, args.varlen);
  // The kernel's swizzle rows (bwd_sm90.cuh, kAtomCols).
  const int columns = sm90_backward_swizzle_columns(spec.head_dim_qk, spec.head_dim_v);
  auto q = encode(*driver, "q", p.dtype, args.q, spec.head_dim_qk, q_rows, p.heads_q, q_outer,
                  args.q_strides, block_m, kBackwardPromotion, columns);
  if (!q) return q.takeError();
  auto k = encode(*driver, "k", p.dtype, args.k, spec.head_dim_qk, k_rows, p.heads_kv, k_outer,
                  args.k_strides, block_n, kBackwardPromotion, columns);
  if (!k) return k.takeError();
  auto v = encode(*driver, "v", p.dtype, args.v, spec.head_dim_v, k_rows, p.heads_kv, k_outer,
                  args.v_strides, block_n, kBackwardPromotion, columns);
  if (!v) return v.takeError();
  auto dout = encode(*driver, "dout", p.dtype, args.dout, spec.head_dim_v, q_rows, p.heads_q,
                     q_outer, args.dout_strides, block_m, kBackwardPromotion, columns);
  if (!dout) return dout.takeError();
  // The fp32 dQ accumulator (the workspace's first rows x head_dim_qk, see
  // make_backward_params) as a 2-d map the kernel reduce-adds its dQ parts
  // into, in the boxes of its staging buffers (32 columns, 128 bytes: one
  // swizzle row, x 64 rows).
  const cuuint64_t accum_dims[2] = {static_cast<cuuint64_t>(spec.head_dim_qk),
                                    static_cast<cuuint64_t>(
                                        forward_lse_rows(p, args.varlen.total_q))};
  const cuuint64_t accum_stride[1] = {static_cast<cuuint64_t>(spec.head_dim_qk) * 4};
  const cuuint32_t accum_box[2] = {BwdSm90Layout::kDQBoxColumns, BwdSm90Layout::kDQBoxRows};
  auto dq_accum = encode_tiled(*driver, "the dQ accumulator (workspace)",
                               CU_TENSOR_MAP_DATA_TYPE_FLOAT32, args.workspace, 2, accum_dims,
                               accum_stride, accum_box, kBackwardPromotion);
  if (!dq_accum) return dq_accum.takeError();
  return BackwardTensorMaps{*q, *k, *v, *dout, *dq_accum};
}

llvm::Error launch_forward_sm90(const LoadedKernel &kernel, const KernelSpec &spec,
                                const Problem &problem, const ForwardArgs &args,
                                FwdParams &params, CUstream stream, int resident_ctas) {
  auto maps = make_forward_tensor_maps(spec, problem, args);
  if (!maps) return maps.takeError();
  void *kernel_args[] = {&params, &maps->q, &maps->k, &maps->v};
  return kernel.launch(
      forward_launch_geometry(spec, problem, resident_ctas > 0 ? resident_ctas : kernel.sm_count(),
                              params.num_splits),
      stream, kernel_args,
      // The kernel waits (griddepcontrol.wait) before its first global access,
      // so its launch and prologue may overlap the tail of the grid before.
      /*dependent=*/true);
}

}  // namespace flashjit
