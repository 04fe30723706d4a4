"""A caller's modifiers: flashjit.attention(score_mod=, mask_mod=,
aux=) against PyTorch's FlexAttention (torch.compile(flex_attention), its
block mask built once) and against flashjit's own kernels without the
modifier, in one process; forward, kernel time (bench/compare.py's timer).

    FLASHJIT_LIB=build/libflashjit.so python3 bench/modifiers.py [--quick] [--json out.json]
                                                                 [--results DIR]

Shapes: bf16, batch 2, 16 heads, 8k tokens, d = 64 and 128. Modifiers:
ALiBi (against flashjit without bias), causal as a mask_mod (against the
built-in causal), a document mask (8 documents), prefix-LM (prefix 1024),
a sliding window of 1024 with 4 sinks. TFLOP/s count every score's work
(no sparsity credit), the same for all three, so the ratios are time
ratios. Also the one-time cost of each: flashjit's first call (NVRTC) and
Flex's compile plus create_block_mask, and a second sequence length's
first call (flashjit compiles nothing; Flex may recompile).

Writes the suite modifiers to bench/results/<gpu>/ (bench/results.py).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

# One torch.compile(flex_attention) per modifier and head dim: past dynamo's
# default of 8 recompiles it falls back to eager flex_attention (unfused,
# the full score matrix), which would be timed as Flex.
for _limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
               "accumulated_cache_size_limit"):
    if hasattr(torch._dynamo.config, _limit):
        setattr(torch._dynamo.config, _limit, 256)

import flashjit  # noqa: E402
import results  # noqa: E402
from compare import short_error, time_ms  # noqa: E402

METHOD = ("kernel time as bench/compare.py's (the GPU kept busy, median of {repeats} samples "
          "after {warmup} warm-up calls); TFLOP/s = 4*b*h*s^2*d / time for every modifier (no "
          "credit for skipped blocks), so ratios are time ratios; backward = forward + backward "
          "minus forward, 2.5x the FLOPs")

# d score_mod / d score of the score_mods, for the backward.
GRADS = {
    "alibi": """
__device__ float score_mod_grad(float score, int b, int h, int q, int k, const Aux &aux) {
  return 1.f;
}""",
}

SNIPPETS = {
    "alibi": ("""
__device__ float score_mod(float score, int b, int h, int q, int k, const Aux &aux) {
  return score + aux.slopes[h] * (k - q);
}""", None),
    # The same through flashjit.mods.alibi (the library's snippet, its
    # derivative included).
    "alibi_shipped": ("flashjit.mods.alibi", None),
    "causal": (None, "__device__ bool mask_mod(int b, int h, int q, int k) { return k <= q; }"),
    "document": (None, """
__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {
  return aux.doc_ids[q] == aux.doc_ids[k];
}"""),
    "prefix_lm": (None, """
__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {
  return k < aux.prefix || k <= q;
}"""),
    "window_sinks": (None, """
__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {
  return k <= q && (q - k < aux.window || k < aux.sinks);
}"""),
}


def flex_variant(name, s, h, slopes, docs):
    """(score_mod, mask_mod) for FlexAttention."""
    if name in ("alibi", "alibi_shipped"):
        return (lambda score, b, hh, q, k: score + slopes[hh] * (k - q)), None
    if name == "causal":
        return None, lambda b, hh, q, k: k <= q
    if name == "document":
        return None, lambda b, hh, q, k: docs[q] == docs[k]
    if name == "prefix_lm":
        return None, lambda b, hh, q, k: (k < 1024) | (k <= q)
    return None, lambda b, hh, q, k: (k <= q) & ((q - k < 1024) | (k < 4))


def aux_of(name, slopes, docs):
    return {"alibi": {"slopes": slopes}, "alibi_shipped": None, "causal": None, "document": {"doc_ids": docs},
            "prefix_lm": {"prefix": 1024}, "window_sinks": {"window": 1024, "sinks": 4}}[name]


def bench(name, d, s, warmup, repeats, args_backward=True):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    b, h = 2, 16
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    slopes = torch.tensor([-2.0 ** (-8 * (i + 1) / h) for i in range(h)], device="cuda")
    docs = (torch.arange(s, device="cuda") // (s // 8)).to(torch.int32)
    flops = 4 * b * h * s * s * d
    row = {"modifier": name, "hdim": d, "seqlen": s}
    score_mod, mask_mod = SNIPPETS[name]
    if score_mod == "flashjit.mods.alibi":
        score_mod = flashjit.mods.alibi(slopes)
    aux = aux_of(name, slopes, docs)
    # Every mask here reads only (q, k) (the documents are the same in both
    # sequences): one block map for all batches and heads, as Flex's
    # create_block_mask(B=None, H=None).
    qk_only = mask_mod is not None
    with torch.no_grad():
        t0 = time.perf_counter()
        flashjit.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, aux=aux,
                           mask_mod_qk_only=qk_only)
        torch.cuda.synchronize()
        row["flashjit_first_call_s"] = time.perf_counter() - t0
        ms = time_ms(lambda: flashjit.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod,
                                                aux=aux, mask_mod_qk_only=qk_only),
                     warmup, repeats)
        row["flashjit"] = flops / ms / 1e9
        base = (lambda: flashjit.attention(q, k, v, causal=True)) if name == "causal" else (
            lambda: flashjit.attention(q, k, v))
        row["flashjit_plain"] = flops / time_ms(base, warmup, repeats) / 1e9
        if mask_mod is not None:
            # The mask_mod as a user writes it, without mask_mod_qk_only: the
            # library's probe finds that it reads only (q, k).
            row["flashjit_no_flag"] = flops / time_ms(
                lambda: flashjit.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod,
                                           aux=aux), warmup, repeats) / 1e9
        # FlexAttention: [b, h, s, d], compiled, its block mask built once.
        qf, kf, vf = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        f_score, f_mask = flex_variant(name, s, h, slopes, docs)
        try:
            compiled = torch.compile(flex_attention)
            t0 = time.perf_counter()
            block_mask = create_block_mask(f_mask, None, None, s, s) if f_mask else None
            compiled(qf, kf, vf, score_mod=f_score, block_mask=block_mask)
            torch.cuda.synchronize()
            row["flex_first_call_s"] = time.perf_counter() - t0
            row["flex"] = flops / time_ms(
                lambda: compiled(qf, kf, vf, score_mod=f_score, block_mask=block_mask),
                warmup, repeats) / 1e9
            if block_mask is not None:
                # flashjit given Flex's own block mask (no pre-pass over
                # mask_mod), as a model passes one mask to every layer.
                row["flashjit_flex_mask"] = flops / time_ms(
                    lambda: flashjit.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod,
                                               aux=aux, mask_mod_qk_only=qk_only,
                                               block_mask=block_mask),
                    warmup, repeats) / 1e9
        except Exception as e:  # noqa: BLE001
            row["flex_error"] = short_error(e)
        if mask_mod is not None:
            # flashjit's own block mask, built once from the CUDA mask_mod
            # (flashjit.create_block_mask), and what building one costs
            # against Flex's create_block_mask (both after their first).
            def own_mask():
                return flashjit.create_block_mask(mask_mod, b, h, s, s, aux=aux,
                                                  mask_mod_qk_only=qk_only)
            try:
                own = own_mask()
                row["flashjit_mask_build_ms"] = time_ms(own_mask, warmup, repeats)
                row["flashjit_own_mask"] = flops / time_ms(
                    lambda: flashjit.attention(q, k, v, mask_mod=mask_mod, aux=aux,
                                               mask_mod_qk_only=qk_only, block_mask=own),
                    warmup, repeats) / 1e9
                if f_mask:
                    row["flex_mask_build_ms"] = time_ms(
                        lambda: create_block_mask(f_mask, None, None, s, s), warmup, repeats)
            except Exception as e:  # noqa: BLE001
                row["flashjit_own_mask_error"] = short_error(e)
        # The backward: forward + backward minus forward, FLOPs 2.5x the
        # forward's (bench/compare.py's convention), both libraries.
        if args_backward:
            dout = torch.randn_like(q)
            qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            grad = GRADS.get(name)

            def fj_fwd_bwd():
                with torch.enable_grad():
                    flashjit.attention(qg, kg, vg, score_mod=score_mod, mask_mod=mask_mod,
                                       aux=aux, mask_mod_qk_only=qk_only,
                                       score_mod_grad=grad).backward(dout)
            def plain_fwd_bwd():
                with torch.enable_grad():
                    flashjit.attention(qg, kg, vg, causal=name == "causal").backward(dout)
            def no_flag_fwd_bwd():
                with torch.enable_grad():
                    flashjit.attention(qg, kg, vg, score_mod=score_mod, mask_mod=mask_mod,
                                       aux=aux, score_mod_grad=grad).backward(dout)
            try:
                total = time_ms(fj_fwd_bwd, warmup, repeats)
                row["flashjit_bwd"] = 2.5 * flops / max(total - ms, 1e-6) / 1e9
                if "flashjit_no_flag" in row:
                    no_flag_ms = flops / row["flashjit_no_flag"] / 1e9
                    total = time_ms(no_flag_fwd_bwd, warmup, repeats)
                    row["flashjit_no_flag_bwd"] = (2.5 * flops / max(total - no_flag_ms, 1e-6)
                                                   / 1e9)
                plain_ms = flops / row["flashjit_plain"] / 1e9
                total = time_ms(plain_fwd_bwd, warmup, repeats)
                row["flashjit_plain_bwd"] = 2.5 * flops / max(total - plain_ms, 1e-6) / 1e9
            except Exception as e:  # noqa: BLE001
                row["flashjit_bwd_error"] = short_error(e)
            if "flashjit_flex_mask" in row:
                def flex_mask_fwd_bwd():
                    with torch.enable_grad():
                        flashjit.attention(qg, kg, vg, score_mod=score_mod, mask_mod=mask_mod,
                                           aux=aux, mask_mod_qk_only=qk_only,
                                           score_mod_grad=grad,
                                           block_mask=block_mask).backward(dout)
                masked_ms = flops / row["flashjit_flex_mask"] / 1e9
                total = time_ms(flex_mask_fwd_bwd, warmup, repeats)
                row["flashjit_flex_mask_bwd"] = 2.5 * flops / max(total - masked_ms, 1e-6) / 1e9
            if "flex" in row:
                qfg, kfg, vfg = (t.detach().clone().requires_grad_(True) for t in (qf, kf, vf))
                doutf = dout.transpose(1, 2).contiguous()

                def flex_fwd_bwd():
                    with torch.enable_grad():
                        compiled(qfg, kfg, vfg, score_mod=f_score,
                                 block_mask=block_mask).backward(doutf)
                try:
                    flex_ms = flops / row["flex"] / 1e9
                    total = time_ms(flex_fwd_bwd, warmup, repeats)
                    row["flex_bwd"] = 2.5 * flops / max(total - flex_ms, 1e-6) / 1e9
                except Exception as e:  # noqa: BLE001
                    row["flex_bwd_error"] = short_error(e)
        # A new sequence length: flashjit compiles nothing.
        s2 = s - 512
        q2, k2, v2 = (t[:, :s2].contiguous() for t in (q, k, v))
        before = flashjit.compile_count()
        t0 = time.perf_counter()
        flashjit.attention(q2, k2, v2, score_mod=score_mod, mask_mod=mask_mod,
                           aux=aux if name != "document" else {"doc_ids": docs[:s2]},
                           mask_mod_qk_only=qk_only)
        torch.cuda.synchronize()
        row["flashjit_new_length_s"] = time.perf_counter() - t0
        row["flashjit_new_length_compiles"] = flashjit.compile_count() - before
    return row


def no_flag_ratios(r):
    """The mask_mod without mask_mod_qk_only over the same with it, forward / backward."""
    cells = [r[a] / r[b] if a in r and b in r else None
             for a, b in (("flashjit_no_flag", "flashjit"),
                          ("flashjit_no_flag_bwd", "flashjit_bwd"))]
    return " / ".join("" if c is None else f"{c:.2f}" for c in cells)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="d=128 only, fewer repeats")
    ap.add_argument("--json", default="")
    ap.add_argument("--no-backward", action="store_true", help="the forward alone")
    ap.add_argument("--only", default="", help="comma list of modifiers (default: all)")
    results.add_arguments(ap)
    args = ap.parse_args()
    dims = (128,) if args.quick else (64, 128)
    warmup, repeats = (3, 7) if args.quick else (5, 15)
    rows = []
    for d in dims:
        for name in (args.only.split(",") if args.only else SNIPPETS):
            try:
                rows.append(bench(name, d, 8192, warmup, repeats, not args.no_backward))
            except Exception as e:  # noqa: BLE001
                rows.append({"modifier": name, "hdim": d, "error": short_error(e)})
            print(json.dumps(rows[-1]), flush=True)
    print("\n=== flashjit modifiers vs FlexAttention (forward TFLOP/s, bf16 2x16 heads 8k) ===")
    print("| modifier | d | flashjit | without modifier | × | Flex | × Flex | with Flex's "
          "block mask | with its own block mask | mask build ms (ours / Flex) | "
          "first call s (ours / Flex) | new length compiles | no flag × flag (fwd / bwd) |")
    for r in rows:
        if "error" in r:
            print(f"| {r['modifier']} | {r['hdim']} | {r['error']} |")
            continue
        flex = r.get("flex")
        print(f"| {r['modifier']} | {r['hdim']} | {r['flashjit']:.1f} | {r['flashjit_plain']:.1f} "
              f"| {r['flashjit'] / r['flashjit_plain']:.2f} | "
              f"{flex if flex is None else round(flex, 1)} | "
              f"{'' if flex is None else round(r['flashjit'] / flex, 2)} | "
              f"{round(r['flashjit_flex_mask'], 1) if 'flashjit_flex_mask' in r else ''} | "
              f"{round(r['flashjit_own_mask'], 1) if 'flashjit_own_mask' in r else ''} | "
              f"{r.get('flashjit_mask_build_ms', float('nan')):.3f} / "
              f"{r.get('flex_mask_build_ms', float('nan')):.3f} | "
              f"{r['flashjit_first_call_s']:.2f} / {r.get('flex_first_call_s', float('nan')):.2f} "
              f"| {r['flashjit_new_length_compiles']} | {no_flag_ratios(r)} |")
    print("\n=== backward TFLOP/s (2.5x the forward's FLOPs, no sparsity credit) ===")
    print("| modifier | d | flashjit | without modifier | × | Flex | × Flex | with Flex's "
          "block mask | × Flex |")
    for r in rows:
        if "flashjit_bwd" in r or "flashjit_bwd_error" in r:
            ours, flex = r.get("flashjit_bwd"), r.get("flex_bwd")
            plain = r.get("flashjit_plain_bwd")
            print(f"| {r['modifier']} | {r['hdim']} | "
                  f"{round(ours, 1) if ours else r.get('flashjit_bwd_error')} | "
                  f"{round(plain, 1) if plain else ''} | "
                  f"{round(ours / plain, 2) if ours and plain else ''} | "
                  f"{round(flex, 1) if flex else r.get('flex_bwd_error', '')} | "
                  f"{round(ours / flex, 2) if ours and flex else ''} | "
                  f"{round(r['flashjit_flex_mask_bwd'], 1) if 'flashjit_flex_mask_bwd' in r else ''} | "
                  f"{round(r['flashjit_flex_mask_bwd'] / flex, 2) if 'flashjit_flex_mask_bwd' in r and flex else ''} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    # A subset of the modifiers (--only) is written only under a --suite name.
    config = {"dtype": "bf16", "batch": 2, "heads": 16, "seqlen": 8192, "dims": list(dims),
              "warmup": warmup, "repeats": repeats, "backward": not args.no_backward}
    results.publish(args, results.suite_name(args, "modifiers"), rows, METHOD.format(**config),
                    config, torch, flashjit.version(), narrowed=bool(args.only))


if __name__ == "__main__":
    main()
