"""The ctypes binding against the C API, without torch or a GPU (run by ctest
as python_capi): the ctypes structs have the C layout, the library loads
through FLASHJIT_LIB, a refused call comes back as the library's message,
the package exports its public names with their signatures, and no module
of it reaches into another's underscore-private names.

    python3 tests/python/test_capi.py <abi_layout binary> <libflashjit.so>
"""
import ast
import ctypes
import glob
import inspect
import os
import subprocess
import sys
import tempfile

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_REPO, "python"))


def check_layout(layout_binary, capi):
    mirrors = {"flashjit_problem": capi.Problem, "flashjit_forward_args": capi.ForwardArgs,
               "flashjit_kvcache_args": capi.KvCacheArgs, "flashjit_varlen_args": capi.VarlenArgs,
               "flashjit_backward_args": capi.BackwardArgs, "flashjit_config": capi.Config,
               "flashjit_aux_value": capi.AuxValue, "flashjit_modifiers": capi.Modifiers,
               "flashjit_block_mask": capi.BlockMask,
               "flashjit_modifier_facts": capi.ModifierFacts}
    seen = {name: set() for name in mirrors}
    errors = []
    for line in subprocess.run([layout_binary], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        key, value = line.rsplit(" ", 1)
        if key.endswith(" sizeof"):
            name = key.split()[0]
            got = ctypes.sizeof(mirrors[name])
            if got != int(value):
                errors.append(f"sizeof {name}: C {value}, ctypes {got}")
            continue
        name, field = key.split(".")
        seen[name].add(field)
        mirror = getattr(mirrors[name], field, None)
        if mirror is None:
            errors.append(f"{name}.{field}: missing from the ctypes mirror")
        elif mirror.offset != int(value):
            errors.append(f"{name}.{field}: C offset {value}, ctypes {mirror.offset}")
    for name, cls in mirrors.items():
        extra = {f[0] for f in cls._fields_} - seen[name]
        if extra:
            errors.append(f"{name}: ctypes fields not in C: {sorted(extra)}")
    return errors


def check_inspect_modifiers(capi):
    """flashjit_inspect_modifiers for a named target (probe compiles, no GPU):
    which of b and h a mask_mod reads and the block maps a call builds, a
    score_mod's own score_mod_grad; and the Python side's checks on them."""
    from flashjit import modifiers, mods as shipped_mods
    errors = []

    def facts(arch=b"sm_90a", **fields):
        out = capi.ModifierFacts()
        rc = capi.lib().flashjit_inspect_modifiers(ctypes.byref(capi.Modifiers(**fields)), arch,
                                                    ctypes.byref(out))
        if rc != 0:
            return capi.last_error()
        return (out.score_mod_defines_grad, out.mask_mod_reads_b, out.mask_mod_reads_h,
                out.mask_mod_qk_only)

    by_batch = (b"bool mask_mod(int b, int h, int q, int k, const Aux &aux) "
                b"{ return aux.ids[b * 64 + q] == aux.ids[b * 64 + k]; }")
    causal = b"bool mask_mod(int b, int h, int q, int k) { return k <= q; }"
    alibi = (b"float score_mod(float s, int b, int h, int q, int k, const Aux &aux) "
             b"{ return s + aux.ids[h] * (k - q); }")
    grad = (b"float score_mod_grad(float s, int b, int h, int q, int k, const Aux &aux) "
            b"{ return 1.f; }")
    for fields, expected in (
            (dict(mask_mod=by_batch, aux=b"const int* ids"), (0, 1, 0, 0)),
            (dict(mask_mod=causal), (0, 0, 0, 1)),
            (dict(mask_mod=causal, mask_mod_qk_only=capi.MASK_MOD_QK_ONLY_OFF), (0, 0, 0, 0)),
            (dict(mask_mod=by_batch, aux=b"const int* ids",
                  mask_mod_qk_only=capi.MASK_MOD_QK_ONLY_ON), (0, 1, 0, 1)),
            (dict(score_mod=alibi + b"\n" + grad, aux=b"const int* ids"), (1, 0, 0, 0)),
            (dict(score_mod=alibi, aux=b"const int* ids"), (0, 0, 0, 0))):
        got = facts(**fields)
        if got != expected:
            errors.append(f"inspect {fields}: {got}, expected {expected}")
    got = facts(arch=b"sm_70", mask_mod=causal)
    if not isinstance(got, str) or "arch 'sm_70'" not in got:
        errors.append(f"inspect for sm_70: {got!r}")
    # What attention() raises before a differentiable forward runs.
    with_grad = capi.Modifiers(score_mod=alibi + b"\n" + grad, aux=b"const int* ids")
    without = capi.Modifiers(score_mod=alibi, aux=b"const int* ids")
    for mods, given, exc, needle in (
            (with_grad, None, None, None),
            (with_grad, "float score_mod_grad(...)", ValueError, "give one of them"),
            (without, None, NotImplementedError, "runs the forward only: define `float "
             "score_mod_grad(float score, int b, int h, int q, int k, const Aux &aux)`"),
            (without, "float score_mod_grad(...)", None, None)):
        try:
            modifiers.check_score_mod_grad(mods, given)
            if exc is not None:
                errors.append(f"check_score_mod_grad({given!r}): no {exc.__name__}")
        except Exception as e:  # noqa: BLE001
            if exc is None or not isinstance(e, exc) or needle not in str(e):
                errors.append(f"check_score_mod_grad({given!r}): {e!r}")
    # The shipped modifiers' flag: True for the masks of q and k alone,
    # None (the library finds out) for the others.
    if (shipped_mods.prefix_lm(3).mask_mod_qk_only is not True
            or shipped_mods.causal().mask_mod_qk_only is not True):
        errors.append("shipped prefix_lm / causal: mask_mod_qk_only is not True")
    return errors


def check_forward_knobs():
    """attention()'s num_splits and pack_gqa as flashjit_config fields (no torch
    needed: the checks and the config come before any tensor is touched)."""
    from flashjit import _capi as capi, _checks, _launch
    errors = []
    os.environ.pop("FLASHJIT_KERNEL_PATH", None)
    fail = _checks.failure("flashjit.attention")
    expected = {(0, None): (0, capi.PACK_GQA_AUTO), (1, False): (1, capi.PACK_GQA_OFF),
                (4, True): (4, capi.PACK_GQA_ON), (256, None): (256, capi.PACK_GQA_AUTO)}
    for (splits, pack), want in expected.items():
        got = _checks.forward_knobs(fail, splits, pack)
        if got != want:
            errors.append(f"forward_knobs({splits}, {pack}) = {got}, expected {want}")
    # The defaults pass no config at all, as before the knobs existed.
    if _launch.forward_config(0, capi.PACK_GQA_AUTO) is not None:
        errors.append("forward_config of the defaults is not None")
    config = _launch.forward_config(4, capi.PACK_GQA_ON)
    got = (config.path, config.block_m, config.splits, config.pack_gqa)
    if got != (capi.PATH_AUTO, 0, 4, capi.PACK_GQA_ON):
        errors.append(f"forward_config(4, on) = {got}")
    os.environ["FLASHJIT_KERNEL_PATH"] = "sm80"
    config = _launch.forward_config(0, capi.PACK_GQA_OFF)
    if (config.path, config.splits, config.pack_gqa) != (capi.PATH_SM80, 0, capi.PACK_GQA_OFF):
        errors.append("forward_config drops $FLASHJIT_KERNEL_PATH")
    del os.environ["FLASHJIT_KERNEL_PATH"]
    P = "flashjit.attention: "
    bad = [(-1, None, ValueError, P + "num_splits must be in [0, 256]"),
           (257, None, ValueError, "got 257"),
           (True, None, TypeError, P + "num_splits must be an int"),
           (2.0, None, TypeError, "got float"),
           (0, 1, TypeError, P + "pack_gqa must be None (the library chooses), True or False, "
                             "got 1")]
    for splits, pack, exc, needle in bad:
        try:
            _checks.forward_knobs(fail, splits, pack)
            errors.append(f"forward_knobs({splits!r}, {pack!r}) accepted")
        except exc as e:
            if needle not in str(e):
                errors.append(f"forward_knobs({splits!r}, {pack!r}): {e!r} lacks {needle!r}")
    return errors


def check_backward_knobs():
    """deterministic as the backward's flashjit_config (no torch needed):
    None when nothing is asked, deterministic = 1 with
    $FLASHJIT_BACKWARD_PATH's family kept; anything but a bool refused."""
    from flashjit import _capi as capi, _checks, _launch
    errors = []
    os.environ.pop("FLASHJIT_BACKWARD_PATH", None)
    if _launch.backward_config(False) is not None:
        errors.append("backward_config(False) is not None")
    config = _launch.backward_config(True)
    if (config.path, config.deterministic, config.splits) != (capi.PATH_AUTO, 1, 0):
        errors.append(f"backward_config(True) = {(config.path, config.deterministic)}")
    os.environ["FLASHJIT_BACKWARD_PATH"] = "sm90"
    config = _launch.backward_config(True)
    if (config.path, config.deterministic) != (capi.PATH_SM90, 1):
        errors.append("backward_config(True) drops $FLASHJIT_BACKWARD_PATH")
    del os.environ["FLASHJIT_BACKWARD_PATH"]
    fail = _checks.failure("flashjit.attention_varlen")
    for good in (False, True):
        if _checks.deterministic_flag(fail, good) is not good:
            errors.append(f"deterministic_flag({good})")
    for bad in (0, 1, None, "True"):
        try:
            _checks.deterministic_flag(fail, bad)
            errors.append(f"deterministic_flag({bad!r}) accepted")
        except TypeError as e:
            needle = "flashjit.attention_varlen: deterministic must be True or False"
            if not str(e).startswith(needle) or not str(e).endswith(f"got {bad!r}"):
                errors.append(f"deterministic_flag({bad!r}): {e}")
    return errors


# flashjit's public names and their signatures (None: a class).
PUBLIC_API = {
    "attention": "(q, k, v, causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None, "
                 "return_lse=False, num_splits=0, pack_gqa=None, score_mod=None, "
                 "mask_mod=None, aux=None, mask_mod_qk_only=None, score_mod_grad=None, "
                 "sinks=None, block_mask=None, q_descale=None, k_descale=None, v_descale=None, "
                 "out_dtype=None, deterministic=False, attention_chunk=0)",
    "attention_varlen": "(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, "
                        "softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0, "
                        "return_lse=False, block_table=None, seqused_k=None, q_descale=None, "
                        "k_descale=None, v_descale=None, out_dtype=None, num_splits=0, "
                        "pack_gqa=None, deterministic=False, attention_chunk=0, "
                        "seqused_q=None)",
    "attention_with_kvcache": "(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, "
                              "block_table=None, softmax_scale=None, causal=False, "
                              "window=(-1, -1), softcap=0.0, num_splits=0, return_lse=False, "
                              "q_descale=None, k_scale=None, v_scale=None, out_dtype=None, "
                              "pack_gqa=None, attention_chunk=0, rotary_cos=None, "
                              "rotary_sin=None, rotary_interleaved=False, cache_batch_idx=None, "
                              "cache_leftpad=None, cu_seqlens_q=None, cu_seqlens_k_new=None, "
                              "max_seqlen_q=None, rotary_seqlens=None)",
    "compile_count": "()",
    "runtime_stats": "()",
    "version": "()",
    "create_block_mask": "(mask_mod, batch, heads, seqlen_q, seqlen_k, aux=None, "
                         "mask_mod_qk_only=None, block_size=128, device=None)",
    "query": "(**options)",
    "tune": "(timeout=None, **options)",
    "precompile": "(timeout=None, **options)",
    "LibraryNotFound": None,
    "FlashjitCommandError": None,
    "BlockMask": None,
    "quantize_fp8": "(q, k, v, per='head', rotate=False, seed=0)",
}
SHIPPED_MODIFIERS = ("alibi", "relative_bias", "document", "prefix_lm", "sliding_window",
                     "causal")


def check_public_api(flashjit):
    """Every public name with its signature, flashjit.mods' modifiers, and
    the exceptions' bases (what callers catch)."""
    errors = []
    if sorted(flashjit.__all__) != sorted(PUBLIC_API):
        errors.append(f"__all__ is {sorted(flashjit.__all__)}, expected {sorted(PUBLIC_API)}")
    for name, signature in PUBLIC_API.items():
        value = getattr(flashjit, name, None)
        if value is None:
            errors.append(f"flashjit.{name} is missing")
        elif signature is None:
            if not inspect.isclass(value):
                errors.append(f"flashjit.{name} is not a class")
        elif str(inspect.signature(value)) != signature:
            errors.append(f"flashjit.{name}{inspect.signature(value)}, expected {signature}")
    if not issubclass(flashjit.LibraryNotFound, ImportError):
        errors.append("LibraryNotFound is not an ImportError")
    if not issubclass(flashjit.FlashjitCommandError, RuntimeError):
        errors.append("FlashjitCommandError is not a RuntimeError")
    missing = [m for m in SHIPPED_MODIFIERS if not callable(getattr(flashjit.mods, m, None))]
    if missing:
        errors.append(f"flashjit.mods lacks {missing}")
    return errors


def check_module_boundaries(package_dir):
    """No module of the package imports another's underscore-private names
    (`from .x import _y`, or `x._y` of a module imported as `from . import
    x`): what modules share is a public name of the module that owns it."""
    errors = []
    modules = {os.path.splitext(os.path.basename(p))[0]
               for p in glob.glob(os.path.join(package_dir, "*.py"))}
    for path in sorted(glob.glob(os.path.join(package_dir, "*.py"))):
        where = os.path.basename(path)
        tree = ast.parse(open(path, encoding="utf-8").read(), where)
        siblings = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.level == 0:
                continue
            for alias in node.names:
                if node.module is None and alias.name in modules:
                    siblings.add(alias.asname or alias.name)
                elif alias.name.startswith("_"):
                    errors.append(f"{where}:{node.lineno}: imports the private "
                                  f"{node.module or ''}.{alias.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in siblings and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                errors.append(f"{where}:{node.lineno}: uses the private "
                              f"{node.value.id}.{node.attr}")
    return errors


def main(argv):
    layout_binary, library = argv[1], argv[2]
    os.environ["FLASHJIT_LIB"] = library
    from flashjit import _capi
    import flashjit

    errors = check_layout(layout_binary, _capi)
    if not flashjit.version():
        errors.append("flashjit.version() is empty")
    if flashjit.compile_count() != 0:
        errors.append(f"compile_count {flashjit.compile_count()} before any call")
    stats = flashjit.runtime_stats()
    expected_stats = {"compiles": 0, "module_loads": 0, "launches": 0, "compile_ms": 0.0,
                      "compiler_wait_ms": 0.0, "database_ms": 0.0, "module_load_ms": 0.0}
    if stats != expected_stats:
        errors.append(f"runtime_stats() before any call: {stats}, expected {expected_stats}")
    unknown = _capi.lib().flashjit_runtime_stat(b"no_such_counter")
    if unknown != 2**64 - 1:
        errors.append(f"flashjit_runtime_stat of an unknown name: {unknown}, expected UINT64_MAX")

    # A call the library refuses (null pointers): nonzero, and the message.
    problem = _capi.Problem(dtype=_capi.BF16, mask=_capi.MASK_CAUSAL, batch=1, heads_q=2,
                            heads_kv=2, seqlen_q=16, seqlen_k=16, head_dim_qk=64, head_dim_v=64,
                            window_left=-1, window_right=-1)
    args = _capi.ForwardArgs()
    rc = _capi.lib().flashjit_forward(ctypes.byref(problem), ctypes.byref(args), None, None)
    message = _capi.last_error()
    print(f"refused call: rc={rc}: {message}")
    if rc == 0 or "null" not in message:
        errors.append(f"null pointers: rc={rc}, message {message!r} should name the null argument")

    # The config's splits and pack_gqa: refused by the library when out of
    # range (before the null pointers), and what attention()'s num_splits and
    # pack_gqa become.
    for field, value in (("splits", 257), ("splits", -1), ("pack_gqa", 3)):
        config = _capi.Config(**{field: value})
        rc = _capi.lib().flashjit_forward(ctypes.byref(problem), ctypes.byref(args), None,
                                          ctypes.byref(config))
        message = _capi.last_error()
        if rc == 0 or f"config.{field}={value} is invalid" not in message:
            errors.append(f"config.{field}={value}: rc={rc}, message {message!r}")
    errors += check_forward_knobs()
    errors += check_backward_knobs()
    errors += check_public_api(flashjit)
    errors += check_module_boundaries(os.path.dirname(flashjit.__file__))

    # Modifiers: the declarations and values are checked before any GPU work.
    mods = _capi.Modifiers(score_mod=b"float score_mod(float s, int b, int h, int q, int k, "
                                     b"const Aux &aux) { return s + aux.bias; }",
                           aux=b"float bias", aux_values=None, aux_count=0)
    for aux_count, values, expected in (
            (0, None, "flashjit_forward_modified: 0 aux values given, 1 fields declared: give "
                      "one per field"),
            (1, (_capi.AuxValue * 1)(_capi.AuxValue(name=b"bias", kind=_capi.AUX_INTEGER,
                                                    integer=3)),
             "flashjit_forward_modified: aux field 'bias' is float: expected a float, not an "
             "integer"),
            (1, (_capi.AuxValue * 1)(_capi.AuxValue(name=b"other", kind=_capi.AUX_REAL,
                                                    real=0.5)),
             "flashjit_forward_modified: no aux field 'other'")):
        mods.aux_count = aux_count
        mods.aux_values = values
        rc = _capi.lib().flashjit_forward_modified(ctypes.byref(problem), ctypes.byref(args),
                                                   ctypes.byref(mods), None, None)
        message = _capi.last_error()
        if rc == 0 or message != expected:
            errors.append(f"modifiers: rc={rc}, message {message!r}, expected {expected!r}")

    # The shipped modifiers by name: their texts and declarations, and an
    # unknown name refused with the list.
    shipped = _capi.Modifiers()
    rc = _capi.lib().flashjit_shipped_modifiers(b"alibi", ctypes.byref(shipped))
    if (rc != 0 or b"aux.slopes[h]" not in (shipped.score_mod or b"")
            or b"return 1.f;" not in (shipped.score_mod_grad or b"")
            or shipped.mask_mod is not None or shipped.aux != b"const float* slopes"):
        errors.append(f"shipped alibi: rc={rc}, {shipped.score_mod!r}, {shipped.aux!r}")
    rc = _capi.lib().flashjit_shipped_modifiers(b"document_mask", ctypes.byref(shipped))
    if (rc != 0 or shipped.score_mod is not None or b"aux.doc_ids" not in shipped.mask_mod
            or shipped.aux != b"const int* doc_ids, int seqlen" or shipped.mask_mod_qk_only):
        errors.append(f"shipped document_mask: rc={rc}, {shipped.mask_mod!r}, {shipped.aux!r}")
    rc = _capi.lib().flashjit_shipped_modifiers(b"prefix_lm", ctypes.byref(shipped))
    if rc != 0 or shipped.mask_mod_qk_only != 1 or shipped.aux != b"int prefix":
        errors.append(f"shipped prefix_lm: rc={rc}, qk_only {shipped.mask_mod_qk_only}")
    errors += check_inspect_modifiers(_capi)
    rc = _capi.lib().flashjit_shipped_modifiers(b"nope", ctypes.byref(shipped))
    expected = ("flashjit_shipped_modifiers: no shipped modifier 'nope': expected one of alibi, "
                "relative_bias, document_mask, prefix_lm, sliding_window_with_sinks, "
                "causal_mask")
    if rc == 0 or _capi.last_error() != expected:
        errors.append(f"shipped 'nope': rc={rc}, message {_capi.last_error()!r}")

    # The backward: the workspace size (O(seqlen): the fp32 dQ accumulator and
    # D = rowsum(dO * O)), 0 for invalid sizes, and a refused call.
    if not _capi.has_backward():
        errors.append("the library does not export flashjit_backward")
    else:
        ws = _capi.lib().flashjit_backward_workspace_bytes(ctypes.byref(problem))
        rows = problem.batch * problem.heads_q * problem.seqlen_q
        if ws < rows * (problem.head_dim_qk + 2) * 4:
            errors.append(f"workspace_bytes {ws} < {rows * (problem.head_dim_qk + 2) * 4}")
        bad = _capi.Problem(dtype=_capi.BF16, mask=_capi.MASK_NONE, batch=0, heads_q=2,
                            heads_kv=2, seqlen_q=16, seqlen_k=16, head_dim_qk=64, head_dim_v=64,
                            window_left=-1, window_right=-1)
        if _capi.lib().flashjit_backward_workspace_bytes(ctypes.byref(bad)) != 0:
            errors.append("workspace_bytes of batch 0 is not 0")
        bargs = _capi.BackwardArgs(workspace_bytes=ws)  # enough bytes, null pointers
        rc = _capi.lib().flashjit_backward(ctypes.byref(problem), ctypes.byref(bargs), None, None)
        message = _capi.last_error()
        print(f"refused backward call: rc={rc}: {message}")
        if rc == 0 or "null" not in message:
            errors.append(f"backward, null pointers: rc={rc}, message {message!r} should name "
                          f"the null argument")
        # Learned sinks: the backward needs both pointers or neither (checked
        # before any GPU work; the pointers are never read here).
        for sinks, dsinks, expected in (
                (16, None, "flashjit_backward_modified: modifiers.sinks is set but "
                           "modifiers.dsinks is NULL: the backward writes the sinks' gradient "
                           "there (heads_q floats)"),
                (None, 16, "flashjit_backward_modified: modifiers.dsinks is set without "
                           "modifiers.sinks: give the forward's sinks too, or neither")):
            sink_mods = _capi.Modifiers(sinks=sinks, dsinks=dsinks)
            rc = _capi.lib().flashjit_backward_modified(ctypes.byref(problem), ctypes.byref(bargs),
                                                        ctypes.byref(sink_mods), None, None)
            message = _capi.last_error()
            if rc == 0 or message != expected:
                errors.append(f"sinks {sinks} dsinks {dsinks}: rc={rc}, message {message!r}, "
                              f"expected {expected!r}")

    # Importing never fails on the library (it loads at import, to start
    # NVRTC's load early): another library under FLASHJIT_LIB is the first
    # call's LibraryNotFound, which says so.
    probe = ("import flashjit\n"
             "try:\n    flashjit.version()\nexcept flashjit.LibraryNotFound as e:\n"
             "    print('refused:', e)\n")
    import _ctypes  # a shared object that is not flashjit's
    other = getattr(_ctypes, "__file__", None)
    if other:  # (None where this Python has _ctypes built in)
        env = dict(os.environ, FLASHJIT_LIB=other,
                   PYTHONPATH=os.path.dirname(os.path.dirname(flashjit.__file__)))
        done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                              text=True)
        if done.returncode != 0 or "not libflashjit.so" not in done.stdout:
            errors.append(f"import with another library as FLASHJIT_LIB: exit "
                          f"{done.returncode}, {done.stdout[-300:]!r} {done.stderr[-500:]!r}")

    # A sanitizer build's library is never picked from the build folders (a
    # plain Python aborts on it), however recent; FLASHJIT_LIB still takes it.
    with tempfile.TemporaryDirectory() as root:
        for folder, sanitize in (("build", ""), ("build-asan", "address,undefined")):
            os.makedirs(os.path.join(root, folder))
            with open(os.path.join(root, folder, "CMakeCache.txt"), "w") as fh:
                fh.write(f"FLASHJIT_SANITIZE:STRING={sanitize}\n")
            open(os.path.join(root, folder, "libflashjit.so"), "w").close()
        os.utime(os.path.join(root, "build", "libflashjit.so"), (1, 1))  # the older one
        saved = os.environ.pop("FLASHJIT_LIB", None)
        try:
            found = _capi.candidate_paths(root)
        finally:
            if saved is not None:
                os.environ["FLASHJIT_LIB"] = saved
        if found != [os.path.join(root, "build", "libflashjit.so")]:
            errors.append(f"candidate_paths with a newer sanitizer build beside build/: {found}")

    # A wrong FLASHJIT_LIB is an ImportError that names the variable.
    _capi._lib = None
    os.environ["FLASHJIT_LIB"] = "/nonexistent/libflashjit.so"
    try:
        _capi.lib()
        errors.append("a missing FLASHJIT_LIB loaded something")
    except flashjit.LibraryNotFound as e:
        if "FLASHJIT_LIB" not in str(e):
            errors.append(f"LibraryNotFound does not name FLASHJIT_LIB: {e}")

    for e in errors:
        print("FAIL", e)
    print("python_capi:", "ok" if not errors else f"{len(errors)} failure(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
