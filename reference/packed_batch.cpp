#include "reference/packed_batch.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

std::vector<int32_t> offsets(const std::vector<int64_t> &lengths) {
  std::vector<int32_t> cu{0};
  for (int64_t n : lengths) cu.push_back(cu.back() + static_cast<int32_t>(n));
  return cu;
}

int64_t sum(const std::vector<int64_t> &lengths) {
  return std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
}

int64_t longest(const std::vector<int64_t> &lengths) {
  return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
}

llvm::Expected<DeviceBuffer> poisoned(size_t bytes) {
  auto buffer = DeviceBuffer::allocate(std::max<size_t>(bytes, 16));
  if (!buffer) return buffer.takeError();
  if (llvm::Error e = buffer->fill_bytes(0xFF)) return e;  // NaN in fp16, bf16 and fp32
  return std::move(*buffer);
}

struct Upload {
  DeviceBuffer *into;
  const void *host;
  size_t bytes;
};

llvm::Error upload_all(std::initializer_list<Upload> uploads) {
  for (const Upload &u : uploads) {
    auto buffer = DeviceBuffer::from_host(u.host, u.bytes);
    if (!buffer) return buffer.takeError();
    *u.into = std::move(*buffer);
  }
  return llvm::Error::success();
}

llvm::Error poison_all(std::initializer_list<std::pair<DeviceBuffer *, size_t>> buffers) {
  for (auto [into, bytes] : buffers) {
    auto buffer = poisoned(bytes);
    if (!buffer) return buffer.takeError();
    *into = std::move(*buffer);
  }
  return llvm::Error::success();
}

// `host` must hold exactly the packed tensor's elements: a caller's
// miscount would otherwise read past its vector or leave rows unset.
llvm::Error expect_elements(const char *name, size_t got, int64_t rows, int64_t row) {
  if (got == size_t(rows * row)) return llvm::Error::success();
  return error(llvm::formatv("packed {0}: {1} elements given, the layout has {2} ({3} rows of {4})",
                             name, got, rows * row, rows, row));
}

llvm::Error expect_inputs(const Problem &p, int64_t tq, int64_t tk, llvm::ArrayRef<uint16_t> q,
                          llvm::ArrayRef<uint16_t> k, llvm::ArrayRef<uint16_t> v) {
  if (llvm::Error e = expect_elements("Q", q.size(), tq, p.heads_q * p.head_dim_qk)) return e;
  if (llvm::Error e = expect_elements("K", k.size(), tk, p.heads_kv * p.head_dim_qk)) return e;
  return expect_elements("V", v.size(), tk, p.heads_kv * p.head_dim_v);
}

}  // namespace

int64_t PackedBatch::total_q() const { return sum(seqlens_q); }
int64_t PackedBatch::total_k() const { return sum(seqlens_k); }
std::vector<int32_t> PackedBatch::cu_seqlens_q() const { return offsets(seqlens_q); }
std::vector<int32_t> PackedBatch::cu_seqlens_k() const { return offsets(seqlens_k); }

PackedBatch equal_lengths(const Problem &problem) {
  PackedBatch batch;
  batch.seqlens_q.assign(size_t(std::max<int64_t>(problem.batch, 0)), problem.seqlen_q);
  batch.seqlens_k.assign(size_t(std::max<int64_t>(problem.batch, 0)), problem.seqlen_k);
  return batch;
}

llvm::Error validate_packed_batch(const Problem &problem, const PackedBatch &batch) {
  if (!problem.varlen) return error("packed lengths were given for a problem that is not varlen");
  if (batch.seqlens_q.size() != batch.seqlens_k.size())
    return error(llvm::formatv("packed batch: {0} query lengths but {1} key lengths",
                               batch.seqlens_q.size(), batch.seqlens_k.size()));
  if (int64_t(batch.size()) != problem.batch)
    return error(llvm::formatv("packed batch: {0} sequences, but the problem's batch is {1}",
                               batch.size(), problem.batch));
  for (size_t b = 0; b < batch.size(); ++b)
    if (batch.seqlens_q[b] < 0 || batch.seqlens_k[b] < 0)
      return error(llvm::formatv("packed batch: sequence {0} has a negative length ({1} queries, "
                                 "{2} keys)",
                                 b, batch.seqlens_q[b], batch.seqlens_k[b]));
  if (longest(batch.seqlens_q) != problem.seqlen_q || longest(batch.seqlens_k) != problem.seqlen_k)
    return error(llvm::formatv("packed batch: the longest sequence has {0} queries and {1} keys, "
                               "but the problem's seqlen_q and seqlen_k are {2} and {3}",
                               longest(batch.seqlens_q), longest(batch.seqlens_k),
                               problem.seqlen_q, problem.seqlen_k));
  constexpr int64_t kMaxTotal = std::numeric_limits<int32_t>::max();
  if (batch.total_q() > kMaxTotal || batch.total_k() > kMaxTotal)
    return error(llvm::formatv("packed batch: {0} queries and {1} keys in all; the int32 offsets "
                               "hold at most {2}",
                               batch.total_q(), batch.total_k(), kMaxTotal));
  return llvm::Error::success();
}

llvm::Expected<const PackedBatch *> packed_batch_for(const Problem &problem,
                                                     const std::optional<PackedBatch> &packed) {
  if (!problem.varlen && !packed) return nullptr;
  if (!packed)
    return error("a varlen problem runs on a packed batch: its sequences' lengths are needed");
  if (llvm::Error e = validate_packed_batch(problem, *packed)) return e;
  return &*packed;
}

std::string describe_packed(const Problem &problem, const PackedBatch &batch) {
  return llvm::formatv("{0} (packed: {1} sequences, {2} queries, {3} keys)", describe(problem),
                       batch.size(), batch.total_q(), batch.total_k())
      .str();
}

TensorElements tensor_elements(const Problem &p, const PackedBatch *packed) {
  const int64_t q_rows = packed ? packed->total_q() : p.batch * p.seqlen_q;
  const int64_t k_rows = packed ? packed->total_k() : p.batch * p.seqlen_k;
  return {size_t(q_rows * p.heads_q * p.head_dim_qk), size_t(k_rows * p.heads_kv * p.head_dim_qk),
          size_t(k_rows * p.heads_kv * p.head_dim_v), size_t(q_rows * p.heads_q * p.head_dim_v),
          size_t(q_rows * p.heads_q)};
}

Problem sequence_problem(const Problem &packed, int64_t seqlen_q, int64_t seqlen_k) {
  Problem one = packed;
  one.varlen = false;
  one.batch = 1;
  one.seqlen_q = seqlen_q;
  one.seqlen_k = seqlen_k;
  return one;
}

double packed_forward_flops(const Problem &packed, const PackedBatch &batch) {
  double flops = 0;
  for (size_t b = 0; b < batch.size(); ++b)
    if (batch.seqlens_q[b] > 0 && batch.seqlens_k[b] > 0)
      flops += sequence_problem(packed, batch.seqlens_q[b], batch.seqlens_k[b]).forward_flops();
  return flops;
}

PackedBatch scaled_packed_batch(const PackedBatch &batch, int64_t max_seqlen,
                                size_t max_sequences) {
  // The longest sequence first (it sets the class's maxima), then the others
  // in order.
  std::vector<size_t> order(batch.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto weight = [&](size_t b) { return std::max(batch.seqlens_q[b], batch.seqlens_k[b]); };
  if (!order.empty()) {
    auto top = std::max_element(order.begin(), order.end(),
                                [&](size_t a, size_t b) { return weight(a) < weight(b); });
    std::rotate(order.begin(), top, top + 1);
  }
  order.resize(std::min(order.size(), max_sequences));
  std::sort(order.begin(), order.end());
  int64_t top = 0;
  for (size_t b : order) top = std::max(top, weight(b));
  auto scaled = [&](int64_t n) {
    if (top <= max_seqlen || n == 0) return n;
    return std::max<int64_t>(1, n * max_seqlen / top);
  };
  PackedBatch out;
  for (size_t b : order) {
    out.seqlens_q.push_back(scaled(batch.seqlens_q[b]));
    out.seqlens_k.push_back(scaled(batch.seqlens_k[b]));
  }
  return out;
}

Problem resized_packed_problem(const Problem &problem, const PackedBatch &batch) {
  Problem p = problem;
  p.batch = int64_t(batch.size());
  p.seqlen_q = longest(batch.seqlens_q);
  p.seqlen_k = longest(batch.seqlens_k);
  return p;
}

void set_packed_strides(const Problem &p, ForwardArgs &a) {
  a.q_strides = {0, p.heads_q * p.head_dim_qk, p.head_dim_qk};
  a.k_strides = {0, p.heads_kv * p.head_dim_qk, p.head_dim_qk};
  a.v_strides = {0, p.heads_kv * p.head_dim_v, p.head_dim_v};
  a.o_strides = {0, p.heads_q * p.head_dim_v, p.head_dim_v};
}

void set_packed_strides(const Problem &p, BackwardArgs &a) {
  a.q_strides = a.dq_strides = {0, p.heads_q * p.head_dim_qk, p.head_dim_qk};
  a.k_strides = a.dk_strides = {0, p.heads_kv * p.head_dim_qk, p.head_dim_qk};
  a.v_strides = a.dv_strides = {0, p.heads_kv * p.head_dim_v, p.head_dim_v};
  a.o_strides = a.dout_strides = {0, p.heads_q * p.head_dim_v, p.head_dim_v};
}

llvm::Expected<PackedForwardInputs> make_packed_forward_inputs(const Problem &p,
                                                               const PackedBatch &batch,
                                                               llvm::ArrayRef<uint16_t> q,
                                                               llvm::ArrayRef<uint16_t> k,
                                                               llvm::ArrayRef<uint16_t> v) {
  if (llvm::Error e = validate_packed_batch(p, batch)) return e;
  const int64_t tq = batch.total_q(), tk = batch.total_k();
  if (llvm::Error e = expect_inputs(p, tq, tk, q, k, v)) return e;
  PackedForwardInputs in;
  const std::vector<int32_t> cu_q = batch.cu_seqlens_q(), cu_k = batch.cu_seqlens_k();
  if (llvm::Error e = upload_all({{&in.q, q.data(), q.size() * 2},
                                  {&in.k, k.data(), k.size() * 2},
                                  {&in.v, v.data(), v.size() * 2},
                                  {&in.cu_seqlens_q, cu_q.data(), cu_q.size() * 4},
                                  {&in.cu_seqlens_k, cu_k.data(), cu_k.size() * 4}}))
    return e;
  if (llvm::Error e = poison_all({{&in.o, size_t(tq * p.heads_q * p.head_dim_v) * 2},
                                  {&in.lse, size_t(tq * p.heads_q) * 4}}))
    return e;
  ForwardArgs &a = in.args;
  a.q = in.q.data();
  a.k = in.k.data();
  a.v = in.v.data();
  a.o = in.o.data();
  a.lse = static_cast<float *>(in.lse.data());
  set_packed_strides(p, a);
  a.varlen = {static_cast<const int32_t *>(in.cu_seqlens_q.data()),
              static_cast<const int32_t *>(in.cu_seqlens_k.data()), tq, tk};
  return in;
}

ForwardArgs PackedBackwardInputs::forward_args(const Problem &problem) const {
  ForwardArgs a;
  a.q = args.q;
  a.k = args.k;
  a.v = args.v;
  a.o = const_cast<void *>(args.o);
  a.lse = const_cast<float *>(args.lse);
  set_packed_strides(problem, a);
  a.varlen = args.varlen;
  return a;
}

llvm::Expected<PackedBackwardInputs> make_packed_backward_inputs(
    const Problem &p, const PackedBatch &batch, llvm::ArrayRef<uint16_t> q,
    llvm::ArrayRef<uint16_t> k, llvm::ArrayRef<uint16_t> v, llvm::ArrayRef<uint16_t> o,
    llvm::ArrayRef<uint16_t> dout, llvm::ArrayRef<float> lse) {
  if (llvm::Error e = validate_packed_batch(p, batch)) return e;
  const int64_t tq = batch.total_q(), tk = batch.total_k();
  if (llvm::Error e = expect_inputs(p, tq, tk, q, k, v)) return e;
  if (llvm::Error e = expect_elements("O", o.size(), tq, p.heads_q * p.head_dim_v)) return e;
  if (llvm::Error e = expect_elements("dO", dout.size(), tq, p.heads_q * p.head_dim_v)) return e;
  if (llvm::Error e = expect_elements("LSE", lse.size(), tq, p.heads_q)) return e;
  PackedBackwardInputs in;
  const std::vector<int32_t> cu_q = batch.cu_seqlens_q(), cu_k = batch.cu_seqlens_k();
  if (llvm::Error e = upload_all({{&in.q, q.data(), q.size() * 2},
                                  {&in.k, k.data(), k.size() * 2},
                                  {&in.v, v.data(), v.size() * 2},
                                  {&in.o, o.data(), o.size() * 2},
                                  {&in.dout, dout.data(), dout.size() * 2},
                                  {&in.lse, lse.data(), lse.size() * 4},
                                  {&in.cu_seqlens_q, cu_q.data(), cu_q.size() * 4},
                                  {&in.cu_seqlens_k, cu_k.data(), cu_k.size() * 4}}))
    return e;
  const size_t workspace = backward_workspace_bytes(p, tq);
  if (llvm::Error e = poison_all({{&in.dq, q.size() * 2},
                                  {&in.dk, k.size() * 2},
                                  {&in.dv, v.size() * 2},
                                  {&in.workspace, workspace}}))
    return e;
  BackwardArgs &a = in.args;
  a.q = in.q.data();
  a.k = in.k.data();
  a.v = in.v.data();
  a.o = in.o.data();
  a.dout = in.dout.data();
  a.lse = static_cast<const float *>(in.lse.data());
  a.dq = in.dq.data();
  a.dk = in.dk.data();
  a.dv = in.dv.data();
  set_packed_strides(p, a);
  a.workspace = in.workspace.data();
  a.workspace_bytes = in.workspace.size();
  a.varlen = {static_cast<const int32_t *>(in.cu_seqlens_q.data()),
              static_cast<const int32_t *>(in.cu_seqlens_k.data()), tq, tk};
  return in;
}

}  // namespace flashjit
