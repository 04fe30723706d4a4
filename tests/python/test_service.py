"""flashjit.query / tune / precompile (python/flashjit/service.py) without a
GPU or torch: the command each runs, its JSON report as a dict, the error of
a bad flag, and where the executable is looked for.

    python3 tests/python/test_service.py FLASHJIT_EXECUTABLE

Run by ctest (python_service) with the build's `flashjit`.
"""
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
from flashjit import service  # noqa: E402  (needs neither torch nor the library)


def test_query_returns_the_report():
    db = os.path.join(tempfile.mkdtemp(prefix="flashjit-service-"), "t.db")
    r = service.query(arch="sm_90a", heads=32, heads_kv=8, seqlen=4096, hdim=128, causal=True,
                      db=db)
    assert r["kernel_id"] == "fwd_sm90_bf16_hdqk128_hdv128_causal_nocap_bm128_bn128_w12_s2_sm_90a", r
    assert r["config"]["path"] == "sm90" and r["config"]["block_m"] == 128, r["config"]
    assert r["problem"]["heads_kv"] == 8 and r["problem"]["mask"] == "causal", r["problem"]
    # A bare flag and a packed batch.
    v = service.query(arch="sm_90a", varlen=True, seqlen_q=300, seqlen_k=900, db=db)
    assert v["problem"]["varlen"] is True and v["kernel_id"].endswith("_varlen_sm_90a"), v


def test_snippets_go_to_the_command_as_files():
    # A mask_mod given as CUDA text: the query's class and kernel carry its
    # hash, as `flashjit query --mask-mod FILE` of the same text.
    db = os.path.join(tempfile.mkdtemp(prefix="flashjit-service-"), "t.db")
    text = ("__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
            "  return aux.doc_ids[q] == aux.doc_ids[k];\n}\n")
    r = service.query(arch="sm_90a", hdim=128, seqlen=2048, mask_mod=text,
                      aux="const int* doc_ids", db=db)
    assert "_mod" in r["kernel_id"], r["kernel_id"]
    path = os.path.join(os.path.dirname(db), "docs.cu")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    same = service.query(arch="sm_90a", hdim=128, seqlen=2048, mask_mod=path,
                         aux="const int* doc_ids", db=db)
    assert same["kernel_id"] == r["kernel_id"], (same["kernel_id"], r["kernel_id"])


def test_a_tune_takes_the_scalar_aux_values():
    # Checked before the GPU is looked for: a missing value is the command's
    # usage error; given, the request gets as far as needing a GPU.
    db = os.path.join(tempfile.mkdtemp(prefix="flashjit-service-"), "t.db")
    text = ("__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
            "  return k < aux.prefix || k <= q;\n}\n")
    options = dict(hdim=64, seqlen=512, mask_mod=text, aux="int prefix", db=db)
    try:
        service.tune(**options)
    except service.FlashjitCommandError as e:
        assert ("the aux field 'prefix' (int) needs a value: give --aux-value prefix=VALUE"
                in str(e)), str(e)
    else:
        raise AssertionError("a tune without the scalar value did not raise")
    try:
        service.tune(aux_values={"prefix": 128}, **options)
    except service.FlashjitCommandError as e:
        assert "tune needs a GPU" in str(e), str(e)  # else it tuned: a GPU is here
    assert service._flags({"aux_values": {"prefix": 128, "window": 3}}) == [
        "--aux-value=prefix=128", "--aux-value=window=3"]


def test_a_bad_flag_raises_the_commands_message():
    try:
        service.query(arch="sm_90a", hdim=100)
    except service.FlashjitCommandError as e:
        assert "--hdim: expected a multiple of 8 in [8, 576], got 100" in str(e), str(e)
    else:
        raise AssertionError("no error for --hdim 100")


def test_flags_and_candidates():
    assert service._flags({"heads_kv": 8, "causal": True, "softcap": None, "pass_": "bwd",
                           "window": False}) == ["--heads-kv=8", "--causal", "--pass=bwd"]
    # mask_mod_qk_only: True and False are requests; None leaves it to the
    # library's probe.
    for value, flags in ((True, ["--mask-mod-qk-only"]), (False, ["--mask-mod-qk-only=false"]),
                         (None, [])):
        assert service._flags({"mask_mod_qk_only": value}) == flags, value
    saved = os.environ.get("FLASHJIT_CLI")
    try:
        os.environ["FLASHJIT_CLI"] = "/nonexistent/flashjit"
        assert service.cli_candidates() == ["/nonexistent/flashjit"]
        try:
            service.query(arch="sm_90a")
        except service.FlashjitCommandError as e:
            assert "tried: /nonexistent/flashjit" in str(e), str(e)
        else:
            raise AssertionError("a missing executable did not raise")
    finally:
        if saved is None:
            del os.environ["FLASHJIT_CLI"]
        else:
            os.environ["FLASHJIT_CLI"] = saved


if __name__ == "__main__":
    if len(sys.argv) > 1:
        os.environ["FLASHJIT_CLI"] = sys.argv[1]
    failed = 0
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"ok   {name}")
            except Exception as e:  # noqa: BLE001 - report every failure
                failed += 1
                print(f"FAIL {name}: {e!r}")
    print(f"{failed} failed")
    sys.exit(1 if failed else 0)
