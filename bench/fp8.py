"""FP8 (e4m3) attention: flashjit's fp8 forward against its bf16 forward and
cuDNN's fp8 attention, and decode over an fp8 KV cache against the bf16
cache, in one process.

Forward (suite fp8_fwd): Q, K and V drawn standard-normal in bf16 and
quantized by flashjit.quantize_fp8 (descales per (batch, KV head)); the bf16
forward runs on the bf16 tensors. FlashAttention's convention as
bench/compare.py: 16k tokens (batch = 16384 // seqlen), hidden 2048 (heads =
2048 // d), d=128 and 256 at 4k, 8k and 16k, full and causal; then
Llama-3.1-70B's 64/8 heads at d=128 and 32k tokens. cuDNN's fp8 attention
runs where this machine has it: cudnn-frontend's Python graph (sdpa_fp8,
per-tensor descales, bf16 output where it accepts one; installed, or from
a wheel in .device-wheels/), else PyTorch SDPA's cuDNN backend on e4m3
tensors; which one (or that none did) is in the result's config. RMSE: each output against a
float64 reference of its own de-quantized inputs (bf16: of the bf16 inputs)
on a slice (batch 0, the last RMSE_ROWS queries, KV heads 0-1 and their
query heads).

Decode (suite fp8_decode): one query token a sequence (bf16) over an e4m3
cache with per-tensor k_scale/v_scale, through attention_with_kvcache,
against the bf16 cache through the same call; bench/decode.py's shape (32/8
heads, d=128) and batch x length rows, then paged caches (shuffled page
tables, pages of 64 and 16). GB/s on the fp8 bytes read (K and V), their
share of HBM's peak, the speed against the bf16 cache. While the library
refuses an fp8 cache under bf16 Q, its cells say so ("unsupported") and the
run goes on.

Kernel time as bench/compare.py (forward) and bench/decode.py (decode) take
it, with input sets rotated: a set is used again only after enough others
that together they exceed twice the GPU's L2, so no call reads what the last
one left in L2.

    FLASHJIT_LIB=build/libflashjit.so python3 bench/fp8.py [--quick] [--part fwd|decode|both]
        [--json out.json] [--results DIR] [--suite NAME]

Writes the suites fp8_fwd and fp8_decode to bench/results/<gpu>/
(bench/results.py); bench/report.py renders them.
"""
import argparse
import glob
import itertools
import json
import math
import os
import re
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import flashjit  # noqa: E402
import results  # noqa: E402
from compare import flops, short_error  # noqa: E402
from compare import time_ms as kernel_ms  # noqa: E402
from decode import HBM_GBS, ROWS as DECODE_ROWS, paged_cache  # noqa: E402
from decode import time_ms as decode_ms  # noqa: E402
from report import HBM_GBS as HBM_GBS_BY_GPU  # noqa: E402

FP8 = torch.float8_e4m3fn
FWD_HEADER = "=== flashjit fp8 forward (TFLOP/s) ==="
DECODE_HEADER = "=== flashjit fp8 KV cache decode (GB/s of the cache read) ==="
# (label, head dim, query heads, KV heads, seqlen, tokens): None heads are
# hidden 2048's; None label is the grid's.
FWD_GRID = [(None, d, None, None, s, 16384) for d in (128, 256) for s in (4096, 8192, 16384)]
FWD_MODELS = [("llama3.1-70b", 128, 64, 8, 32768, 32768)]
RMSE_ROWS = 128
# Each implementation's inputs rotate over enough sets to exceed this many
# times L2, capped (memory) at MAX_SETS.
L2_MULTIPLE = 2
MAX_SETS = 8
METHOD_FWD = ("kernel time (bench/compare.py's): CUDA events over back-to-back calls, the GPU kept "
              "busy while the host enqueues them, input sets rotated past {l2} MiB of L2; median of "
              "{repeats} samples after {warmup} warm-up calls; TFLOP/s = 4*b*h*s^2*d / time, halved "
              "when causal, for fp8 and bf16 alike; RMSE against float64 of the de-quantized inputs, "
              "batch 0, last {rmse_rows} queries, KV heads 0-1")
METHOD_DECODE = ("kernel time (bench/decode.py's): CUDA events over 50 back-to-back calls, the GPU "
                 "kept busy for twice the host's enqueue time, input sets rotated past {l2} MiB of "
                 "L2; median of {repeats} samples after {warmup} warm-up calls; GB/s = bytes of K "
                 "and V in the cache's dtype / time; x bf16 = the bf16 cache's time / the fp8 "
                 "cache's")
# What a refusal by the library (or a library without the fp8 interface
# yet) says, as opposed to a failure of a call it accepted.
REFUSAL = re.compile(r"not served|not supported|unsupported|unexpected keyword|has no attribute",
                     re.IGNORECASE)


def failure(e):
    """A cell for a call that raised: the error, and whether the library
    refused the call (an unsupported combination) rather than failed in it."""
    cell = {"error": short_error(e)}
    if REFUSAL.search(str(e)) or isinstance(e, NotImplementedError):
        cell["unsupported"] = True
    return cell


def l2_bytes():
    return getattr(torch.cuda.get_device_properties(torch.cuda.current_device()),
                   "L2_cache_size", 50 << 20)


def sets_past_l2(set_bytes, l2):
    """How many input sets a rotation needs so that a set comes back only
    after L2_MULTIPLE x L2 of other inputs have been read."""
    return max(1, min(MAX_SETS, math.ceil(L2_MULTIPLE * l2 / max(set_bytes, 1))))


def rotating(calls):
    """One callable that calls each of `calls` in turn."""
    ring = itertools.cycle(calls)
    return lambda: next(ring)()


def timed(fns, time_fn, warmup, repeats, **measure):
    """{"ms", **per-ms measures} of the rotation over fns; measure: name ->
    amount, reported as amount / time (e.g. tflops: FLOPs / 1e12)."""
    ms = time_fn(rotating(fns), warmup, repeats)
    return dict({"ms": ms}, **{k: v / (ms * 1e-3) for k, v in measure.items()})


# ---- references -----------------------------------------------------------------------------

def dequantized(x, descale, heads_kv):
    """x [1, s, h, d] (a batch-0 slice) as float64, times its descale: None
    (a 16-bit tensor), one element, or [1, heads_kv] for h's groups."""
    x = x.double()
    if descale is None:
        return x
    if descale.numel() == 1:
        return x * descale.double().reshape(())
    per_head = descale.double().reshape(1, heads_kv).repeat_interleave(x.shape[2] // heads_kv, 1)
    return x * per_head[:, None, :, None]


def slice_rmse(out, q, k, v, causal, descales=(None, None, None)):
    """RMSE of out [b, s, h, d] against float64 attention of the de-quantized
    inputs, on batch 0, the last RMSE_ROWS queries and KV heads 0-1 with
    their query heads (seqlen_q == seqlen_k, so causal is either corner)."""
    s, hq, d = q.shape[1], q.shape[2], q.shape[3]
    hkv = k.shape[2]
    group, g = hq // hkv, min(hkv, 2)
    first = max(0, s - RMSE_ROWS)
    dq, dk, dv = (None if x is None else (x if x.numel() == 1 else x[:1, :g])
                  for x in descales)
    qs = dequantized(q[:1, first:, :g * group], dq, g)[0]
    ks = dequantized(k[:1, :, :g], dk, g)[0].repeat_interleave(group, 1)
    vs = dequantized(v[:1, :, :g], dv, g)[0].repeat_interleave(group, 1)
    scores = torch.einsum("nhd,shd->hns", qs, ks) / math.sqrt(d)
    if causal:
        rows = torch.arange(first, s, device=q.device)[:, None]
        scores.masked_fill_(torch.arange(s, device=q.device)[None, :] > rows, float("-inf"))
    ref = torch.einsum("hns,shd->nhd", torch.softmax(scores, -1), vs)
    got = out[0, first:, :g * group].double()
    return float((got - ref).pow(2).mean().sqrt())


# ---- cuDNN's fp8 attention ------------------------------------------------------------------

FRONTEND = {}  # the cudnn-frontend handle, made once


def frontend_fp8(q8, k8, v8, descales, causal):
    """cudnn-frontend's sdpa_fp8 graph over [b, s, h, d] e4m3 tensors and
    one-element descales: (call, the output [b, s, h, d], out dtype name).
    The output is bf16 where this cuDNN takes it, else e4m3 with scale 1."""
    cudnn = import_cudnn_frontend()
    if "handle" not in FRONTEND:
        FRONTEND["handle"] = cudnn.create_handle()
    handle = FRONTEND["handle"]
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    b, s, h, d = q8.shape
    ones = torch.ones(1, 1, 1, 1, device=q8.device, dtype=torch.float32)
    scales = [x.reshape(1, 1, 1, 1).float().contiguous() for x in descales] + [ones] * 3
    errors = []
    for out_dtype, cudnn_out in ((torch.bfloat16, cudnn.data_type.BFLOAT16),
                                 (FP8, cudnn.data_type.FP8_E4M3)):
        try:
            graph = cudnn.pygraph(io_data_type=cudnn.data_type.FP8_E4M3,
                                  intermediate_data_type=cudnn.data_type.FLOAT,
                                  compute_data_type=cudnn.data_type.FLOAT, handle=handle)
            # cuDNN's dims are [b, h, s, d]: transposed views of the same memory.
            views = [t.transpose(1, 2) for t in (q8, k8, v8)]
            tq, tk, tv = (graph.tensor(name=n, dim=list(t.shape), stride=list(t.stride()),
                                       data_type=cudnn.data_type.FP8_E4M3)
                          for n, t in zip("QKV", views))
            tscales = [graph.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1],
                                    data_type=cudnn.data_type.FLOAT)
                       for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s",
                                 "scale_o")]
            args = dict(q=tq, k=tk, v=tv, attn_scale=1.0 / math.sqrt(d), use_causal_mask=causal,
                        **dict(zip(("descale_q", "descale_k", "descale_v", "descale_s", "scale_s",
                                    "scale_o"), tscales)))
            try:
                o, _stats, amax_s, amax_o = graph.sdpa_fp8(generate_stats=False, **args)
            except TypeError:  # frontends before generate_stats took is_inference
                o, _stats, amax_s, amax_o = graph.sdpa_fp8(is_inference=True, **args)
            out = torch.empty(b, s, h, d, device=q8.device, dtype=out_dtype)
            o.set_output(True).set_dim(list(out.transpose(1, 2).shape)).set_stride(
                list(out.transpose(1, 2).stride())).set_data_type(cudnn_out)
            amax = [torch.empty(1, 1, 1, 1, device=q8.device, dtype=torch.float32) for _ in range(2)]
            for t in (amax_s, amax_o):
                t.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(
                    cudnn.data_type.FLOAT)
            graph.validate()
            graph.build_operation_graph()
            graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            graph.check_support()
            graph.build_plans()
            workspace = torch.empty(graph.get_workspace_size(), device=q8.device, dtype=torch.uint8)
            pack = dict(zip([tq, tk, tv] + tscales + [o, amax_s, amax_o],
                            views + scales + [out.transpose(1, 2)] + amax))

            def call():
                graph.execute(pack, workspace, handle=handle)
                return out
            return call, (lambda out_: out_.float()), str(out_dtype).replace("torch.", "")
        except Exception as e:  # the next output dtype, else the caller's error
            errors.append(f"{out_dtype}: {short_error(e)}")
    raise RuntimeError("; ".join(errors))


def torch_fp8(q8, k8, v8, descales, causal):
    """PyTorch SDPA under the cuDNN backend on e4m3 tensors: the descales
    folded into the softmax scale and applied to V's side afterwards
    (one-element descales). aten._scaled_dot_product_cudnn_attention is
    not tried: PyTorch 2.11 hands e4m3 tensors to a 16-bit cuDNN kernel
    there, which reads past them (an illegal address, H100, 2026-12-07)."""
    qd, kd, vd = (float(x.reshape(())) for x in descales)
    scale = qd * kd / math.sqrt(q8.shape[-1])
    qt, kt, vt = (t.transpose(1, 2) for t in (q8, k8, v8))
    gqa = {"enable_gqa": True} if k8.shape[2] != q8.shape[2] else {}

    def call():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale,
                                                  **gqa)
    return call, (lambda out: out.transpose(1, 2).float() * vd), "float8_e4m3fn"


def import_cudnn_frontend():
    """cudnn-frontend's Python module: installed, or from a wheel in
    $FLASHJIT_EXTRA_WHEELS (default .device-wheels; the GPU machine has no
    package registry) unpacked into a temporary folder."""
    try:
        import cudnn
        return cudnn
    except ImportError:
        pass
    folder = os.environ.get("FLASHJIT_EXTRA_WHEELS", os.path.join(ROOT, ".device-wheels"))
    wheels = sorted(glob.glob(os.path.join(folder, "nvidia_cudnn_frontend-*.whl")))
    if not wheels:
        raise ImportError(f"no cudnn-frontend installed, nor a wheel in {folder}")
    target = tempfile.mkdtemp(prefix="cudnn-frontend-")
    with zipfile.ZipFile(wheels[-1]) as z:
        z.extractall(target)
    sys.path.insert(0, target)
    import cudnn
    return cudnn


CUDNN_PATHS = [("cudnn-frontend sdpa_fp8", frontend_fp8),
               ("torch sdpa, cuDNN backend", torch_fp8)]


def find_cudnn_fp8():
    """The first of CUDNN_PATHS that runs a small e4m3 attention here:
    {"path": name or None, "version", "refused": {name: error}}."""
    found = {"path": None, "refused": {}}
    torch.manual_seed(0)
    x = torch.randn(3, 1, 256, 2, 128, device="cuda")
    q8, k8, v8 = x.to(FP8).unbind(0)
    one = torch.ones(1, device="cuda")
    for name, prepare in CUDNN_PATHS:
        try:
            call, _, _ = prepare(q8, k8, v8, (one, one, one), False)
            call()
            torch.cuda.synchronize()
        except Exception as e:
            found["refused"][name] = short_error(e)
            continue
        found["path"] = name
        if name.startswith("cudnn-frontend"):
            cudnn = import_cudnn_frontend()
            found["version"] = f"frontend {getattr(cudnn, '__version__', '?')}, backend " \
                               f"{cudnn.backend_version()}"
        break
    return found


# ---- forward --------------------------------------------------------------------------------

def fwd_inputs(b, s, h, hkv, d, seed, cudnn):
    """One input set: the bf16 tensors, flashjit's per-head quantization of
    them and, for cuDNN, a per-tensor one."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(b, s, heads, d, device="cuda", dtype=torch.bfloat16, generator=gen)
               for heads in (h, hkv, hkv))
    out = {"bf16": (q, k, v), "fp8": flashjit.quantize_fp8(q, k, v, per="head")}
    if cudnn:
        out["cudnn"] = flashjit.quantize_fp8(q, k, v, per="tensor")
    return out


def bench_fwd(label, d, hq, hkv, s, tokens, causal, warmup, repeats, cudnn_path, l2):
    b = max(1, tokens // s)
    h = hq or 2048 // d
    hkv = hkv or h
    row = {"hdim": d, "causal": causal, "seqlen": s, "batch": b, "heads": h,
           **({"model": label} if label else {}), **({"heads_kv": hkv} if hkv != h else {})}
    work = flops(b, h, s, d, causal) / 1e12
    prepare = dict(CUDNN_PATHS).get(cudnn_path)
    try:
        n_sets = sets_past_l2(b * s * (h + 2 * hkv) * d, l2)
        sets = [fwd_inputs(b, s, h, hkv, d, seed, prepare is not None) for seed in range(n_sets)]
    except Exception as e:  # out of memory, or no quantize_fp8: every cell says why
        cell = failure(e)
        row.update(ours_fp8=cell, ours_bf16=cell, cudnn_fp8=cell if prepare else None)
        torch.cuda.empty_cache()
        return row
    row["input_sets"] = n_sets
    first = sets[0]

    def fp8_call(inputs):
        q8, k8, v8, qd, kd, vd = inputs["fp8"]
        return lambda: flashjit.attention(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd,
                                          v_descale=vd, out_dtype=torch.bfloat16)

    def bf16_call(inputs):
        q, k, v = inputs["bf16"]
        return lambda: flashjit.attention(q, k, v, causal=causal)

    for key, make, inputs, descales in (
            ("ours_fp8", fp8_call, first["fp8"][:3], first["fp8"][3:]),
            ("ours_bf16", bf16_call, first["bf16"], (None, None, None))):
        try:
            calls = [make(x) for x in sets]
            out = calls[0]()
            row[key] = timed(calls, kernel_ms, warmup, repeats, tflops=work)
            row[key]["rmse"] = slice_rmse(out, *inputs, causal, descales)
            del out
        except Exception as e:  # a failure is a result, not the end of the run
            row[key] = failure(e)

    row["cudnn_fp8"] = None
    if prepare:
        try:
            prepared = [prepare(*x["cudnn"][:3], x["cudnn"][3:], causal) for x in sets]
            calls = [p[0] for p in prepared]
            out = prepared[0][1](calls[0]())
            row["cudnn_fp8"] = timed(calls, kernel_ms, warmup, repeats, tflops=work)
            row["cudnn_fp8"]["rmse"] = slice_rmse(out, *first["cudnn"][:3], causal,
                                                  first["cudnn"][3:])
            row["cudnn_fp8"]["out_dtype"] = prepared[0][2]
            del out, prepared, calls
        except Exception as e:
            row["cudnn_fp8"] = failure(e)
    for name in ("ours_bf16", "cudnn_fp8"):
        mine, other = row["ours_fp8"], row[name] or {}
        if "tflops" in mine and "tflops" in other:
            row["ours_fp8/" + name] = mine["tflops"] / other["tflops"]
    del sets, first
    torch.cuda.empty_cache()
    return row


# ---- decode ---------------------------------------------------------------------------------

def decode_sets(b, sk, hkv, d, n_sets):
    """n_sets (k, v) bf16 caches [b, sk, hkv, d] and their per-tensor e4m3
    quantization (k8, v8, k_scale, v_scale); the latter None with the
    error where the library cannot quantize."""
    bf16, fp8, error = [], [], None
    for seed in range(n_sets):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        k, v = (torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                for _ in range(2))
        bf16.append((k, v))
        if error is None:
            try:
                _, k8, v8, _, ks, vs = flashjit.quantize_fp8(k[:, :1], k, v, per="tensor")
                fp8.append((k8, v8, ks, vs))
            except Exception as e:
                error = e
    return bf16, (None if error else fp8), error


def bench_decode(b, sk, hq, hkv, d, warmup, repeats, pages, l2, hbm):
    torch.manual_seed(0)
    q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
    lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
    fp8_bytes = 2 * b * sk * hkv * d
    row = {"batch": b, "seqlen_k": sk, "heads_q": hq, "heads_kv": hkv, "hdim": d,
           "kv_bytes_fp8": fp8_bytes, "kv_bytes_bf16": 2 * fp8_bytes}
    n_sets = sets_past_l2(fp8_bytes, l2)
    row["input_sets"] = n_sets
    bf16, fp8, quant_error = decode_sets(b, sk, hkv, d, n_sets)
    outs = {}

    def measure(key, calls, nbytes):
        try:
            outs[key] = calls[0]()
            row[key] = timed(calls, decode_ms, warmup, repeats, gbs=nbytes / 1e9)
        except Exception as e:
            row[key] = failure(e)

    measure("bf16", [(lambda k=k, v=v: flashjit.attention_with_kvcache(q, k, v, cache_seqlens=lens))
                     for k, v in bf16], 2 * fp8_bytes)
    if fp8 is None:
        row["fp8"] = failure(quant_error)
    else:
        measure("fp8", [(lambda k8=k8, v8=v8, ks=ks, vs=vs: flashjit.attention_with_kvcache(
            q, k8, v8, cache_seqlens=lens, k_scale=ks, v_scale=vs)) for k8, v8, ks, vs in fp8],
            fp8_bytes)
    for page in pages:
        key = f"p{page}"
        if "error" in row["fp8"]:
            row[key] = dict(row["fp8"])
            continue
        if sk % page:
            row[key] = {"error": f"seqlen_k {sk} is not a multiple of page {page}"}
            continue
        # Paged through bytes: the page scatter indexes uint8 as it would e4m3.
        paged = []
        for k8, v8, ks, vs in fp8:
            kc, vc, table = paged_cache(k8.view(torch.uint8), v8.view(torch.uint8), page)
            paged.append((kc.view(FP8), vc.view(FP8), table, ks, vs))
        measure(key, [(lambda kc=kc, vc=vc, t=t, ks=ks, vs=vs: flashjit.attention_with_kvcache(
            q, kc, vc, cache_seqlens=lens, block_table=t, k_scale=ks, v_scale=vs))
            for kc, vc, t, ks, vs in paged], fp8_bytes)
        del paged
        torch.cuda.empty_cache()
    if "gbs" in row.get("fp8", {}):
        row["fp8"]["hbm_fraction"] = row["fp8"]["gbs"] / hbm
        if "ms" in row["bf16"]:
            row["fp8/bf16"] = row["bf16"]["ms"] / row["fp8"]["ms"]
        for page in pages:
            if "gbs" in row[f"p{page}"]:
                row[f"p{page}/contiguous"] = row[f"p{page}"]["gbs"] / row["fp8"]["gbs"]
    if "fp8" in outs and "bf16" in outs:
        row["max_abs_diff_vs_bf16"] = float((outs["fp8"].float() - outs["bf16"].float()).abs().max())
    for held in (bf16, fp8 or [], outs):
        held.clear()
    torch.cuda.empty_cache()
    return row


# ---- tables ---------------------------------------------------------------------------------

def cell_text(c, key, spec):
    if not c:
        return "-"
    if key in c:
        return format(c[key], spec)
    return "refused" if c.get("unsupported") else "err"


def ratio_text(x):
    return f"{x:.2f}" if x is not None else "-"


def print_fwd(rows, cudnn):
    print()
    print(FWD_HEADER)
    print(f"e4m3 Q/K/V, bf16 out; cuDNN fp8: {cudnn['path'] or 'none here'}")
    print("| d | mask | seqlen | b x h | fp8 | bf16 | cuDNN fp8 | x bf16 | x cuDNN | RMSE fp8 | RMSE bf16 |")
    print("| ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        heads = f"{r['heads']}" + (f"/{r['heads_kv']}" if "heads_kv" in r else "")
        print(f"| {r['hdim']} | {'causal' if r['causal'] else 'full'} | {r['seqlen']} | "
              f"{r['batch']}x{heads} | {cell_text(r['ours_fp8'], 'tflops', '.1f')} | "
              f"{cell_text(r['ours_bf16'], 'tflops', '.1f')} | "
              f"{cell_text(r['cudnn_fp8'], 'tflops', '.1f')} | "
              f"{ratio_text(r.get('ours_fp8/ours_bf16'))} | "
              f"{ratio_text(r.get('ours_fp8/cudnn_fp8'))} | "
              f"{cell_text(r['ours_fp8'], 'rmse', '.2e')} | "
              f"{cell_text(r['ours_bf16'], 'rmse', '.2e')} |", flush=True)
    for r in rows:
        for key in ("ours_fp8", "ours_bf16", "cudnn_fp8"):
            if r[key] and "error" in r[key]:
                print(f"    d={r['hdim']} s={r['seqlen']} {key}: {r[key]['error']}")


def print_decode(rows, pages, hbm):
    print()
    print(DECODE_HEADER)
    print(f"bf16 Q, e4m3 cache (per-tensor scales) against the bf16 cache; % of {hbm:.0f} GB/s")
    paged = "".join(f" p{p} | p{p}/contig |" for p in pages)
    print("| batch x KV | fp8 | % HBM | bf16 | x bf16 |" + paged)
    print("| --- | ---: | ---: | ---: | ---: |" + " ---: |" * 2 * len(pages))
    for r in rows:
        fp8 = r["fp8"]
        share = f"{100 * fp8['hbm_fraction']:.0f}" if "hbm_fraction" in fp8 else "-"
        cols = "".join(f" {cell_text(r[f'p{p}'], 'gbs', '.0f')} | "
                       f"{ratio_text(r.get(f'p{p}/contiguous'))} |" for p in pages)
        print(f"| {r['batch']} x {r['seqlen_k']} | {cell_text(fp8, 'gbs', '.0f')} | {share} | "
              f"{cell_text(r['bf16'], 'gbs', '.0f')} | {ratio_text(r.get('fp8/bf16'))} |" + cols,
              flush=True)
    refused = next((r["fp8"]["error"] for r in rows if r["fp8"].get("unsupported")), None)
    if refused:
        print(f"fp8 cache refused by the library: {refused}")


# ---- main -----------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="forward d=128 at 4k and 16k, no 32k model row; decode.py's quick rows")
    ap.add_argument("--part", default="both", choices=["fwd", "decode", "both"])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20, help="timed samples per cell (median)")
    ap.add_argument("--pages", default="64,16", help="page sizes of the paged fp8 cache ('' none)")
    ap.add_argument("--json", default="")
    results.add_arguments(ap)
    args = ap.parse_args()
    warmup, repeats = (3, 10) if args.quick else (args.warmup, args.repeats)
    pages = [int(x) for x in args.pages.split(",") if x]
    l2 = l2_bytes()
    gpu = torch.cuda.get_device_name()
    hbm = HBM_GBS_BY_GPU.get(results.gpu_slug(gpu), HBM_GBS)
    print(f"{gpu} | torch {torch.__version__} | flashjit {flashjit.version()} | "
          f"L2 {l2 >> 20} MiB | HBM peak {hbm:.0f} GB/s", flush=True)
    out = {}
    failed = 0
    common = {"warmup": warmup, "repeats": repeats, "l2_mib": l2 >> 20}

    if args.part in ("fwd", "both"):
        cudnn = find_cudnn_fp8()
        print(f"cuDNN fp8: {cudnn['path'] or 'none'}"
              + "".join(f"\n    {k}: {v}" for k, v in cudnn["refused"].items()), flush=True)
        shapes = FWD_GRID + FWD_MODELS
        if args.quick:
            shapes = [x for x in FWD_GRID if x[1] == 128 and x[4] in (4096, 16384)]
        rows = []
        for label, d, hq, hkv, s, tokens in shapes:
            for causal in (False, True):
                rows.append(bench_fwd(label, d, hq, hkv, s, tokens, causal, warmup, repeats,
                                      cudnn["path"], l2))
                print(json.dumps(rows[-1]), flush=True)
        print_fwd(rows, cudnn)
        failed += sum("error" in r["ours_fp8"] or "error" in r["ours_bf16"] for r in rows)
        config = dict(common, dtype="e4m3 (bf16 out) vs bf16", quantize="per (batch, KV head)",
                      cudnn_fp8=cudnn, rmse_rows=RMSE_ROWS)
        results.publish(args, results.suite_name(args, "fp8", "fwd"), rows,
                        METHOD_FWD.format(l2=l2 >> 20, rmse_rows=RMSE_ROWS, **common), config,
                        torch, flashjit.version())
        out["fwd"] = {"cudnn_fp8": cudnn, "rows": rows}

    if args.part in ("decode", "both"):
        rows = []
        decode_rows = [DECODE_ROWS[0], DECODE_ROWS[2], DECODE_ROWS[5]] if args.quick else DECODE_ROWS
        for b, sk in decode_rows:
            rows.append(bench_decode(b, sk, 32, 8, 128, warmup, repeats, pages, l2, hbm))
            print(json.dumps(rows[-1]), flush=True)
        print_decode(rows, pages, hbm)
        failed += sum("error" in r["bf16"]
                      or ("error" in r["fp8"] and not r["fp8"].get("unsupported")) for r in rows)
        config = dict(common, dtype="bf16 Q, e4m3 cache vs bf16 cache", scales="per tensor",
                      pages=pages, hbm_gbs=hbm)
        results.publish(args, results.suite_name(args, "fp8", "decode"), rows,
                        METHOD_DECODE.format(l2=l2 >> 20, **common), config, torch,
                        flashjit.version())
        out["decode"] = rows

    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
