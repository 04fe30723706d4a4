"""flashjit's fp8 helpers without a GPU (run by ctest as python_fp8_cpu):
quantize_fp8's codes and descales, the Hadamard rotation's invariance of
Q K^T, the fp8 argument checks that precede any GPU work, and the custom
ops' schemas and fake outputs. Needs torch (any build, CPU is enough);
without it the test is skipped (exit 77, ctest's SKIP_RETURN_CODE).

    python3 tests/python/test_fp8_cpu.py
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import run_tests, torch  # noqa: E402  (this checkout's python/ first)

SKIP = 77  # ctest's SKIP_RETURN_CODE for this test

E4M3_MAX = 448.0
# e4m3: 3 mantissa bits, so rounding to nearest moves a normal value by at
# most 2^-4 of itself; below the smallest normal (2^-6) the step is 2^-9,
# half of it 2^-10 (in units of the descale).
REL_STEP, SUBNORMAL_HALF_STEP = 2.0 ** -4, 2.0 ** -10


def _groups(x, heads_kv):
    b, s, h, d = x.shape
    return x.reshape(b, s, heads_kv, h // heads_kv, d)


def _dequantize(x8, descale, heads_kv):
    x = x8.to(torch.float64)
    if descale.numel() == 1:
        return x * descale.double()
    return (_groups(x, heads_kv) * descale.double().view(x.shape[0], 1, heads_kv, 1, 1)
            ).reshape(x.shape)


def test_per_head_descales_are_amax_over_448():
    import flashjit
    torch.manual_seed(1)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        q = torch.randn(3, 37, 8, 64).to(dtype)
        k = (torch.randn(3, 41, 2, 64) * 5).to(dtype)
        v = (torch.randn(3, 41, 2, 48) / 7).to(dtype)
        q8, k8, v8, qd, kd, vd = flashjit.quantize_fp8(q, k, v)
        for name, x, x8, d in (("q", q, q8, qd), ("k", k, k8, kd), ("v", v, v8, vd)):
            assert x8.dtype == torch.float8_e4m3fn, (name, x8.dtype)
            assert d.dtype == torch.float32 and tuple(d.shape) == (3, 2), (name, d.shape)
            amax = _groups(x.float(), 2).abs().amax(dim=(1, 3, 4))
            assert torch.equal(d, amax / E4M3_MAX), (name, dtype, (d - amax / 448).abs().max())
            # Each group's largest magnitude lands on 448.
            top = _groups(x8.float(), 2).abs().amax(dim=(1, 3, 4))
            assert torch.equal(top, torch.full_like(top, E4M3_MAX)), (name, top)


def test_round_trip_error_bounds():
    import flashjit
    torch.manual_seed(2)
    q = torch.randn(2, 300, 4, 128)
    q[0, 5, 1, 3] = 40.0  # an outlier: the rest of its group lands near the subnormals
    k, v = torch.randn(2, 200, 4, 128), torch.rand(2, 200, 4, 128) * 1e-3
    for per in ("head", "tensor"):
        outs = flashjit.quantize_fp8(q, k, v, per=per)
        for x, x8, d in zip((q, k, v), outs[:3], outs[3:]):
            if per == "tensor":
                assert tuple(d.shape) == (1,), d.shape
                assert torch.equal(d, (x.abs().amax() / E4M3_MAX).reshape(1))
            back = _dequantize(x8, d, 4)
            scale = (d.double() if d.numel() == 1 else
                     d.double().view(2, 1, 4, 1).expand(2, x.shape[1], 4, 1))
            bound = torch.maximum(x.double().abs() * REL_STEP, SUBNORMAL_HALF_STEP * scale)
            excess = ((back - x.double()).abs() - bound * (1 + 1e-6)).max().item()
            assert excess <= 0, (per, excess)
            # Standard-normal inputs: about 2-3% relative RMS error.
            if x is k:
                rel = ((back - x.double()).norm() / x.double().norm()).item()
                assert 0.005 < rel < 0.04, (per, rel)


def test_zero_groups_get_descale_one():
    import flashjit
    q = torch.zeros(1, 4, 2, 64)
    k = torch.randn(1, 4, 2, 64)
    k[:, :, 1] = 0
    q8, k8, _, qd, kd, _ = flashjit.quantize_fp8(q, k, k)
    assert torch.equal(qd, torch.ones(1, 2)), qd
    assert kd[0, 1].item() == 1.0 and kd[0, 0].item() != 1.0, kd
    assert not q8.float().any() and not k8[:, :, 1].float().any()


def _scores(q, k):
    heads_q, heads_kv = q.shape[2], k.shape[2]
    k = k.repeat_interleave(heads_q // heads_kv, dim=2)
    return torch.einsum("bshd,bthd->bhst", q, k)


def test_rotation_keeps_qk_and_is_orthogonal():
    from flashjit import fp8
    torch.manual_seed(3)
    for dim, block in ((64, 64), (128, 128), (192, 64), (256, 256), (96, 32), (80, 16)):
        assert fp8.hadamard_block(dim) == block, (dim, fp8.hadamard_block(dim))
        for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
            q = torch.randn(2, 9, 8, dim, dtype=dtype)
            k = torch.randn(2, 11, 2, dim, dtype=dtype)
            qr, kr = fp8.rotate_heads(torch, q, 2), fp8.rotate_heads(torch, k, 2)
            assert qr.dtype == dtype
            s0, s1 = _scores(q, k), _scores(qr, kr)
            rel = ((s1 - s0).norm() / s0.norm()).item()
            assert rel < tol, (dim, dtype, rel)
            # Orthogonal: norms kept row by row.
            assert torch.allclose(qr.norm(dim=-1), q.norm(dim=-1), rtol=tol * 10), (dim, dtype)
            # Not the identity, and each query head uses its KV head's matrix:
            # a query head equal to its KV head's key rotates to the same row.
            assert not torch.allclose(qr, q)
            q_from_k = k.repeat_interleave(4, dim=2)
            assert torch.allclose(fp8.rotate_heads(torch, q_from_k, 2),
                                  kr.repeat_interleave(4, dim=2), rtol=tol, atol=tol)
    # Reproducible from the seed, different across seeds and KV heads.
    x = torch.randn(1, 3, 2, 64, dtype=torch.float64)
    assert torch.equal(fp8.rotate_heads(torch, x, 2, seed=5), fp8.rotate_heads(torch, x, 2, seed=5))
    assert not torch.allclose(fp8.rotate_heads(torch, x, 2, seed=5),
                              fp8.rotate_heads(torch, x, 2, seed=6))
    signs = fp8.rotation_signs(torch, 2, 64)
    assert not torch.equal(signs[0], signs[1])


def _attention(q, k, v):
    """float64 softmax(q k^T / sqrt(d)) v with GQA."""
    group = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    s = torch.einsum("bshd,bthd->bhst", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhst,bthd->bshd", s.softmax(-1), v)


def test_rotation_spreads_outliers():
    """With outliers (N(0,1) plus 0.1% of entries from N(0, 10^2)), rotating
    Q and K first lowers the end-to-end error of attention over the
    de-quantized inputs against the original ones (about 1.3e-2 -> 8.5e-3
    here); V is not rotated."""
    import flashjit
    torch.manual_seed(4)

    def outliers(*shape):
        x = torch.randn(*shape)
        return torch.where(torch.rand(*shape) < 1e-3, torch.randn(*shape) * 10, x)

    q, k, v = outliers(1, 256, 8, 128), outliers(1, 256, 2, 128), outliers(1, 256, 2, 128)
    exact = _attention(q.double(), k.double(), v.double())
    errors = {}
    for rotate in (False, True):
        q8, k8, v8, qd, kd, vd = flashjit.quantize_fp8(q, k, v, rotate=rotate)
        out = _attention(_dequantize(q8, qd, 2), _dequantize(k8, kd, 2), _dequantize(v8, vd, 2))
        errors[rotate] = (out - exact).pow(2).mean().sqrt().item()
        if rotate:
            plain = flashjit.quantize_fp8(q, k, v)
            assert torch.equal(v8.view(torch.uint8), plain[2].view(torch.uint8))
            assert torch.equal(vd, plain[5])
    print(f"attention RMSE with outliers against the unquantized inputs: plain "
          f"{errors[False]:.4e}, rotated {errors[True]:.4e}")
    assert errors[True] < 0.8 * errors[False], errors


def test_quantize_rejects():
    import flashjit
    x = torch.randn(1, 4, 2, 64)
    for args, kwargs, exc, needle in (
            ((x, x, x), {"per": "row"}, ValueError, "per must be 'head' or 'tensor'"),
            ((x[0], x, x), {}, ValueError, "q must be a 4-D tensor"),
            ((x.int(), x, x), {}, TypeError, "q must be bf16, fp16, fp32 or fp64"),
            ((torch.randn(1, 4, 3, 64), x, x), {}, ValueError, "multiple of heads_kv")):
        try:
            flashjit.quantize_fp8(*args, **kwargs)
        except exc as e:
            assert needle in str(e), (needle, str(e))
        else:
            raise AssertionError(f"accepted: {needle}")


# ---- the fp8 argument checks (before any GPU work) ----------------------------

def _expect(exc, needle, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        assert needle in str(e), f"{needle!r} not in {str(e)!r}"
        return str(e)
    raise AssertionError(f"no {exc.__name__} with {needle!r}")


def test_fp8_argument_checks():
    from flashjit import _capi, _checks
    fail = _checks.failure("flashjit.attention")
    e4m3, bf16 = torch.float8_e4m3fn, torch.bfloat16
    q8 = torch.zeros(2, 5, 8, 64, dtype=e4m3)
    q16 = torch.zeros(2, 5, 8, 64, dtype=bf16)
    grid, one = torch.ones(2, 2), torch.ones(1)

    def elements(q, kv_dtype, qd=None, kd=None, vd=None, out_dtype=None, per_head=False,
                 names=("q_descale", "k_descale", "v_descale")):
        return _checks.fp8_elements(torch, fail, q, kv_dtype, tuple(zip(names, (qd, kd, vd))),
                                    out_dtype, 2, 2, per_head)

    # Accepted: per (batch, KV head), per tensor, any strides; the output dtype.
    e = elements(q8, e4m3, grid, grid, grid)
    assert (e.kv_dtype, e.out_dtype, e.out_torch_dtype) == (_capi.KV_SAME, _capi.OUT_AUTO, bf16)
    assert e.strides == (2, 1) and e.fp8
    e = elements(q8, e4m3, one, one, one, out_dtype=torch.float16)
    assert e.strides == (0, 0) and e.out_dtype == _capi.OUT_FP16
    assert e.out_torch_dtype == torch.float16
    transposed = torch.ones(2, 2).t()
    e = elements(q8, e4m3, transposed, transposed, transposed)
    assert e.strides == (1, 2) and e.descales[0] is transposed
    # Mixed layouts become one packed [batch, heads_kv] layout.
    e = elements(q8, e4m3, grid, one, transposed)
    assert e.strides == (2, 1)
    assert all(d.is_contiguous() and tuple(d.shape) == (2, 2) for d in e.descales)
    assert torch.equal(e.descales[1], torch.ones(2, 2))
    # An fp8 cache under 16-bit q: kv_dtype e4m3, [heads_kv] scales (strides 0, 1).
    e = elements(q16, e4m3, None, torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]),
                 per_head=True, names=("q_descale", "k_scale", "v_scale"))
    assert e.kv_dtype == _capi.KV_E4M3 and e.strides == (0, 1) and e.out_torch_dtype == bf16
    e = elements(q16, bf16, out_dtype=bf16)
    assert not e.fp8 and e.out_dtype == _capi.OUT_AUTO

    P = "flashjit.attention: "
    _expect(TypeError, P + "q_descale is missing: q is float8_e4m3fn", elements, q8, e4m3,
            None, grid, grid)
    _expect(TypeError, "v_descale is missing", elements, q8, e4m3, grid, grid, None)
    _expect(TypeError, P + "k_descale is given but k is torch.bfloat16", elements, q16, bf16,
            None, grid, None)
    _expect(TypeError, "q_descale is given but q is torch.bfloat16", elements, q16, bf16, grid)
    _expect(TypeError, "q_descale must be float32", elements, q8, e4m3, grid.double(), grid, grid)
    _expect(TypeError, "k_descale must be a float32 tensor", elements, q8, e4m3, grid, 0.5, grid)
    _expect(ValueError, "v_descale has shape (2, 3), expected [batch, heads_kv] = [2, 2] or one "
                        "element", elements, q8, e4m3, grid, grid, torch.ones(2, 3))
    _expect(ValueError, "q_descale has shape (2,)", elements, q8, e4m3, torch.ones(2), grid, grid)
    _expect(ValueError, "k_scale has shape (3,), expected [batch, heads_kv] = [2, 2], "
                        "[heads_kv] = [2] or one element", elements, q16, e4m3, None,
            torch.ones(3), one, per_head=True, names=("q_descale", "k_scale", "v_scale"))
    _expect(ValueError, "k_descale is on meta but q is on cpu", elements, q8, e4m3, grid,
            torch.ones(2, 2, device="meta"), grid)
    _expect(TypeError, P + "k is torch.bfloat16 but q is torch.float8_e4m3fn: fp8 attention "
                           "takes q, k and v all in e4m3", elements, q8, bf16, grid)
    _expect(TypeError, "out_dtype must be torch.bfloat16 or torch.float16", elements, q8, e4m3,
            grid, grid, grid, out_dtype=torch.float32)
    _expect(ValueError, "out_dtype is torch.float16 but q is torch.bfloat16", elements, q16, bf16,
            out_dtype=torch.float16)
    # The mixed dtypes of check_inputs name the fp8 side.
    message = _checks.mixed_dtype_message(torch, "k", e4m3, bf16)
    assert "attention_with_kvcache" in message, message

    # fp8 inputs are forward only: refused under autograd, fine without it.
    qg = torch.zeros(2, 5, 8, 64, dtype=e4m3).requires_grad_()
    _expect(NotImplementedError, P + "q, q_descale require grad, but fp8 (float8_e4m3fn) "
                                     "attention is forward only", _checks.refuse_fp8_grad,
            torch, fail, True, (("q", qg), ("k", q8), ("q_descale", grid.requires_grad_())))
    with torch.no_grad():
        _checks.refuse_fp8_grad(torch, fail, True, (("q", qg),))
    _checks.refuse_fp8_grad(torch, fail, False, (("q", qg),))


def test_head_dims_pad_to_16_bytes():
    from flashjit import _capi, _checks, _launch
    fail = _checks.failure("flashjit.attention")
    options, _, _ = _checks.attention_options(fail, 72, False, (-1, -1), 0.0, None)
    q8 = torch.zeros(1, 1, 1, 72, dtype=torch.float8_e4m3fn)
    e = _checks.fp8_elements(torch, fail, q8, q8.dtype, (("q_descale", torch.ones(1)),
                                                         ("k_descale", torch.ones(1)),
                                                         ("v_descale", torch.ones(1))),
                             None, 1, 1)
    p = _launch.padded_problem(_capi.E4M3, 1, 1, 1, 4, 4, 72, 40, options, e)
    assert (p.head_dim_qk, p.head_dim_v, p.dtype) == (80, 48, _capi.E4M3)
    assert abs(p.softmax_scale - 1 / math.sqrt(72)) < 1e-7
    p = _launch.padded_problem(_capi.BF16, 1, 1, 1, 4, 4, 72, 40, options)
    assert (p.head_dim_qk, p.head_dim_v) == (72, 40)
    # A kernel-ready e4m3 tensor has strides of whole 16 bytes.
    from flashjit import _layout
    assert _layout.kernel_ready(torch.zeros(2, 3, 4, 64, dtype=torch.float8_e4m3fn))
    assert not _layout.kernel_ready(torch.zeros(2, 3, 4, 72, dtype=torch.float8_e4m3fn))
    assert _layout.kernel_ready(torch.zeros(2, 3, 4, 72, dtype=torch.bfloat16))
    padded = _layout.prepare(torch, torch.ones(1, 1, 1, 72, dtype=torch.float8_e4m3fn), 8)
    assert padded.shape[-1] == 80 and padded.dtype == torch.float8_e4m3fn
    assert padded[..., 72:].float().abs().sum() == 0 and padded[..., :72].float().min() == 1


def test_custom_op_schemas_and_fake_dtypes():
    """The descales and out_dtype are in the ops' schemas, and the fake
    implementations give the output its dtype (what torch.compile sees)."""
    try:
        from flashjit import ops
    except (AttributeError, ImportError) as e:  # torch < 2.4: no custom_op
        print(f"skip: no custom ops ({e})")
        return
    # Defaulted (calls without them, opcheck's among them, keep working);
    # test_arguments_cpu.py checks the arguments after them.
    for op, names in ((torch.ops.flashjit.attention_fwd,
                       "Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None, "
                       "ScalarType? out_dtype=None"),
                      (torch.ops.flashjit.attention_varlen_fwd,
                       "Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None, "
                       "ScalarType? out_dtype=None"),
                      (torch.ops.flashjit.attention_varlen_kvcache,
                       "Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None, "
                       "ScalarType? out_dtype=None"),
                      (torch.ops.flashjit.attention_with_kvcache,
                       "Tensor? q_descale=None, Tensor? k_scale=None, Tensor? v_scale=None, "
                       "ScalarType? out_dtype=None")):
        schema = str(op.default._schema)
        assert names in schema, schema
    from torch._subclasses.fake_tensor import FakeTensorMode
    e4m3 = torch.float8_e4m3fn
    with FakeTensorMode():
        q = torch.empty(2, 5, 8, 64, dtype=e4m3)
        k = torch.empty(2, 7, 2, 64, dtype=e4m3)
        v = torch.empty(2, 7, 2, 32, dtype=e4m3)
        d = torch.empty(2, 2)
        for out_dtype, want in ((None, torch.bfloat16), (torch.float16, torch.float16)):
            out, lse = torch.ops.flashjit.attention_fwd(q, k, v, False, -1, -1, 0.0, None, 0, 0,
                                                        d, d, d, out_dtype)
            assert out.dtype == want and tuple(out.shape) == (2, 5, 8, 32), (out.dtype, out.shape)
            assert lse.dtype == torch.float32 and tuple(lse.shape) == (2, 8, 5)
        cu = torch.empty(3, dtype=torch.int32)
        out, _ = torch.ops.flashjit.attention_varlen_fwd(q[0], k[0], v[0], cu, cu, 5, 7, False,
                                                         -1, -1, 0.0, None, d, d, d, None)
        assert out.dtype == torch.bfloat16 and tuple(out.shape) == (5, 8, 32)
        q16 = torch.empty(2, 1, 8, 64, dtype=torch.float16)
        out, _ = torch.ops.flashjit.attention_with_kvcache(q16, k, v, None, None, None, None, None,
                                                           False, -1, -1, 0.0, 0, None, d, d,
                                                           None)
        assert out.dtype == torch.float16, out.dtype
    assert ops.pack_code(None) == 0


def skip_reason():
    """Why these tests cannot run here (no GPU needed), or None."""
    if torch is None:
        return "torch is not installed"
    if not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no float8_e4m3fn"
    return None


if __name__ == "__main__":
    sys.exit(run_tests(globals(), skip=skip_reason, skip_status=SKIP))
