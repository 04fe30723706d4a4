"""ctypes mirror of include/flashjit/flashjit.h and the search for libflashjit.so.

Kept free of torch so that the library can be found (and its version read)
on a machine without PyTorch.
"""
import ctypes
import glob
import os
import threading

# enum flashjit_dtype / flashjit_kv_dtype / flashjit_out_dtype / flashjit_mask
BF16, FP16, E4M3 = 0, 1, 2
KV_SAME, KV_E4M3 = 0, 1
OUT_AUTO, OUT_BF16, OUT_FP16 = 0, 1, 2
MASK_NONE, MASK_CAUSAL, MASK_WINDOW = 0, 1, 2
# enum flashjit_path / enum flashjit_pack_gqa
PATH_AUTO, PATH_SM80, PATH_SM90 = 0, 1, 2
PACK_GQA_AUTO, PACK_GQA_ON, PACK_GQA_OFF = 0, 1, 2


class Problem(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int32),
        ("mask", ctypes.c_int32),
        ("batch", ctypes.c_int64),
        ("heads_q", ctypes.c_int64),
        ("heads_kv", ctypes.c_int64),
        ("seqlen_q", ctypes.c_int64),
        ("seqlen_k", ctypes.c_int64),
        ("head_dim_qk", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("softmax_scale", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("page_size", ctypes.c_int32),
        ("seqused_k", ctypes.c_int32),
        ("varlen", ctypes.c_int32),
        ("kv_dtype", ctypes.c_int32),
        ("out_dtype", ctypes.c_int32),
        ("attention_chunk", ctypes.c_int32),
    ]


class ForwardArgs(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
    ] + [
        (f"{t}_stride_{d}", ctypes.c_int64)
        for t in ("q", "k", "v", "o")
        for d in ("batch", "seq", "head")
    ] + [
        ("q_descale", ctypes.c_void_p),
        ("k_descale", ctypes.c_void_p),
        ("v_descale", ctypes.c_void_p),
        ("descale_stride_batch", ctypes.c_int64),
        ("descale_stride_head", ctypes.c_int64),
    ]


class VarlenArgs(ctypes.Structure):
    _fields_ = [
        ("cu_seqlens_q", ctypes.c_void_p),
        ("cu_seqlens_k", ctypes.c_void_p),
        ("total_q", ctypes.c_int64),
        ("total_k", ctypes.c_int64),
        ("seqused_q", ctypes.c_void_p),
        ("seqused_k", ctypes.c_void_p),
    ]


class KvCacheArgs(ctypes.Structure):
    _fields_ = [
        ("cache_seqlens", ctypes.c_void_p),
        ("page_table", ctypes.c_void_p),
        ("page_table_stride", ctypes.c_int64),
        ("num_pages", ctypes.c_int64),
        ("k_new", ctypes.c_void_p),
        ("v_new", ctypes.c_void_p),
        ("seqlen_new", ctypes.c_int64),
    ] + [
        (f"{t}_stride_{d}", ctypes.c_int64)
        for t in ("k_new", "v_new")
        for d in ("batch", "seq", "head")
    ] + [
        ("cache_batch_idx", ctypes.c_void_p),
        ("num_cache_batches", ctypes.c_int64),
        ("cache_leftpad", ctypes.c_void_p),
        ("cu_seqlens_k_new", ctypes.c_void_p),
    ]


class BackwardArgs(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("dout", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("dq", ctypes.c_void_p),
        ("dk", ctypes.c_void_p),
        ("dv", ctypes.c_void_p),
    ] + [
        (f"{t}_stride_{d}", ctypes.c_int64)
        for t in ("q", "k", "v", "o", "do", "dq", "dk", "dv")
        for d in ("batch", "seq", "head")
    ] + [
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_uint64),
    ]


class Config(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int32)
                for name in ("path", "block_m", "block_n", "warps", "stages", "deterministic",
                             "splits", "pack_gqa")]


AUX_POINTER, AUX_INTEGER, AUX_REAL = 0, 1, 2


class AuxValue(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("pointer", ctypes.c_void_p),
        ("integer", ctypes.c_int64),
        ("real", ctypes.c_double),
    ]


class BlockMask(ctypes.Structure):
    _fields_ = [
        ("block_q", ctypes.c_int32),
        ("block_k", ctypes.c_int32),
        ("batches", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("q_blocks", ctypes.c_int64),
        ("k_blocks", ctypes.c_int64),
        ("kv_num_blocks", ctypes.c_void_p),
        ("kv_indices", ctypes.c_void_p),
        ("full_kv_num_blocks", ctypes.c_void_p),
        ("full_kv_indices", ctypes.c_void_p),
    ]


class Modifiers(ctypes.Structure):
    _fields_ = [
        ("score_mod", ctypes.c_char_p),
        ("mask_mod", ctypes.c_char_p),
        ("aux", ctypes.c_char_p),
        ("aux_values", ctypes.POINTER(AuxValue)),
        ("aux_count", ctypes.c_int64),
        ("mask_mod_qk_only", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("score_mod_grad", ctypes.c_char_p),
        ("sinks", ctypes.c_void_p),
        ("dsinks", ctypes.c_void_p),
        ("block_mask", ctypes.POINTER(BlockMask)),
    ]


# Modifiers.mask_mod_qk_only (enum flashjit_mask_mod_qk_only).
MASK_MOD_QK_ONLY_AUTO, MASK_MOD_QK_ONLY_ON, MASK_MOD_QK_ONLY_OFF = 0, 1, 2


class ModifierFacts(ctypes.Structure):
    _fields_ = [
        ("score_mod_defines_grad", ctypes.c_int32),
        ("mask_mod_reads_b", ctypes.c_int32),
        ("mask_mod_reads_h", ctypes.c_int32),
        ("mask_mod_qk_only", ctypes.c_int32),
    ]


class LibraryNotFound(ImportError):
    """libflashjit.so could not be found or loaded."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# python/flashjit/ -> the repository root
_REPO_ROOT = os.path.dirname(os.path.dirname(_PACKAGE_DIR))


def sanitized_build(folder):
    """Whether a build tree was configured with sanitizers (FLASHJIT_SANITIZE
    in its CMakeCache.txt): its library needs their runtime loaded first, and
    a plain Python aborts on it (no exception to catch), so such a tree is
    taken only through FLASHJIT_LIB."""
    try:
        with open(os.path.join(folder, "CMakeCache.txt")) as fh:
            for line in fh:
                if line.startswith("FLASHJIT_SANITIZE:"):
                    return bool(line.split("=", 1)[1].strip())
    except OSError:
        pass
    return False


def candidate_paths(repo_root=None):
    """Where libflashjit.so is looked for, in order (repo_root: the source
    tree whose build folders are searched, by default this package's)."""
    env = os.environ.get("FLASHJIT_LIB")
    if env:
        # A file, or a folder holding libflashjit.so. When set, it is the only
        # candidate: a wrong FLASHJIT_LIB must not silently fall back.
        return [os.path.join(env, "libflashjit.so") if os.path.isdir(env) else env]
    # Installed by pip: the library inside the package.
    installed = os.path.join(_PACKAGE_DIR, "libflashjit.so")
    if os.path.exists(installed):
        return [installed]
    root = repo_root or _REPO_ROOT
    found = []
    for path in glob.glob(os.path.join(root, "build*", "libflashjit.so")):
        try:
            built = os.path.getmtime(path)
        except OSError:  # removed since the glob
            continue
        if not sanitized_build(os.path.dirname(path)):
            found.append((built, path))
    # The most recently built tree first (build/, build-debug/, ...).
    found = [path for _, path in sorted(found, reverse=True)]
    bundle = os.path.join(root, ".device", "lib", "libflashjit.so")
    if os.path.exists(bundle):
        found.append(bundle)
    return found


_lib = None
_lib_lock = threading.Lock()


def _declare(lib):
    lib.flashjit_forward.argtypes = [
        ctypes.POINTER(Problem), ctypes.POINTER(ForwardArgs), ctypes.c_void_p,
        ctypes.POINTER(Config)]
    lib.flashjit_forward.restype = ctypes.c_int
    if hasattr(lib, "flashjit_preload_compiler"):
        lib.flashjit_preload_compiler.argtypes = []
        lib.flashjit_preload_compiler.restype = None
    if hasattr(lib, "flashjit_forward_modified"):
        lib.flashjit_forward_modified.argtypes = [
            ctypes.POINTER(Problem), ctypes.POINTER(ForwardArgs), ctypes.POINTER(Modifiers),
            ctypes.c_void_p, ctypes.POINTER(Config)]
        lib.flashjit_forward_modified.restype = ctypes.c_int
    if hasattr(lib, "flashjit_forward_kvcache"):
        lib.flashjit_forward_kvcache.argtypes = [
            ctypes.POINTER(Problem), ctypes.POINTER(ForwardArgs), ctypes.POINTER(KvCacheArgs),
            ctypes.c_void_p, ctypes.POINTER(Config)]
        lib.flashjit_forward_kvcache.restype = ctypes.c_int
    if hasattr(lib, "flashjit_forward_varlen"):
        lib.flashjit_forward_varlen.argtypes = [
            ctypes.POINTER(Problem), ctypes.POINTER(ForwardArgs), ctypes.POINTER(VarlenArgs),
            ctypes.c_void_p, ctypes.POINTER(Config)]
        lib.flashjit_forward_varlen.restype = ctypes.c_int
    # The serving call (a packed batch over a KV cache): newer than varlen.
    if hasattr(lib, "flashjit_forward_varlen_kvcache"):
        lib.flashjit_forward_varlen_kvcache.argtypes = [
            ctypes.POINTER(Problem), ctypes.POINTER(ForwardArgs), ctypes.POINTER(VarlenArgs),
            ctypes.POINTER(KvCacheArgs), ctypes.c_void_p, ctypes.POINTER(Config)]
        lib.flashjit_forward_varlen_kvcache.restype = ctypes.c_int
    # A library older than the backward still serves the forward;
    # has_backward() tells, and the backward raises a clear error without it.
    if hasattr(lib, "flashjit_backward"):
        lib.flashjit_backward.argtypes = [
            ctypes.POINTER(Problem), ctypes.POINTER(BackwardArgs), ctypes.c_void_p,
            ctypes.POINTER(Config)]
        lib.flashjit_backward.restype = ctypes.c_int
        lib.flashjit_backward_workspace_bytes.argtypes = [ctypes.POINTER(Problem)]
        lib.flashjit_backward_workspace_bytes.restype = ctypes.c_uint64
    if hasattr(lib, "flashjit_backward_modified"):
        lib.flashjit_backward_modified.argtypes = [
            ctypes.POINTER(Problem), ctypes.POINTER(BackwardArgs), ctypes.POINTER(Modifiers),
            ctypes.c_void_p, ctypes.POINTER(Config)]
        lib.flashjit_backward_modified.restype = ctypes.c_int
    if hasattr(lib, "flashjit_create_block_mask"):
        lib.flashjit_create_block_mask.argtypes = [
            ctypes.POINTER(Problem), ctypes.POINTER(Modifiers), ctypes.POINTER(BlockMask),
            ctypes.c_void_p]
        lib.flashjit_create_block_mask.restype = ctypes.c_int
    if hasattr(lib, "flashjit_inspect_modifiers"):
        lib.flashjit_inspect_modifiers.argtypes = [ctypes.POINTER(Modifiers), ctypes.c_char_p,
                                                   ctypes.POINTER(ModifierFacts)]
        lib.flashjit_inspect_modifiers.restype = ctypes.c_int
    if hasattr(lib, "flashjit_shipped_modifiers"):
        lib.flashjit_shipped_modifiers.argtypes = [ctypes.c_char_p, ctypes.POINTER(Modifiers)]
        lib.flashjit_shipped_modifiers.restype = ctypes.c_int
    if hasattr(lib, "flashjit_backward_varlen"):
        lib.flashjit_backward_varlen.argtypes = [
            ctypes.POINTER(Problem), ctypes.POINTER(BackwardArgs), ctypes.POINTER(VarlenArgs),
            ctypes.c_void_p, ctypes.POINTER(Config)]
        lib.flashjit_backward_varlen.restype = ctypes.c_int
        lib.flashjit_backward_varlen_workspace_bytes.argtypes = [ctypes.POINTER(Problem),
                                                                 ctypes.c_int64]
        lib.flashjit_backward_varlen_workspace_bytes.restype = ctypes.c_uint64
    lib.flashjit_last_error.argtypes = []
    lib.flashjit_last_error.restype = ctypes.c_char_p
    lib.flashjit_version.argtypes = []
    lib.flashjit_version.restype = ctypes.c_char_p
    lib.flashjit_compile_count.argtypes = []
    lib.flashjit_compile_count.restype = ctypes.c_uint64
    if hasattr(lib, "flashjit_runtime_stat"):
        lib.flashjit_runtime_stat.argtypes = [ctypes.c_char_p]
        lib.flashjit_runtime_stat.restype = ctypes.c_uint64
    return lib


def _python_sites():
    """This interpreter's site-packages folders, where pip puts the NVRTC
    that comes with PyTorch (nvidia/cu13/lib): the library looks there after
    $FLASHJIT_NVRTC and the CUDA toolkit (runtime/nvrtc_compiler.h)."""
    import site
    import sys
    sites = []
    try:
        sites += site.getsitepackages()
    except AttributeError:  # some virtualenvs lack it
        pass
    try:
        sites.append(site.getusersitepackages())
    except AttributeError:
        pass
    sites += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    seen = []
    for s in sites:
        if s and s not in seen and os.path.isdir(s):
            seen.append(s)
    return os.pathsep.join(seen)


def lib():
    """The loaded library (loaded on first use), or LibraryNotFound."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        # Before the first compile loads NVRTC; a value the caller set stays.
        os.environ.setdefault("FLASHJIT_PYTHON_SITES", _python_sites())
        paths = candidate_paths()
        if not paths:
            raise LibraryNotFound(
                "flashjit: libflashjit.so not found. Build it (cmake -S . -B build && "
                "cmake --build build) in " + _REPO_ROOT + ", or set FLASHJIT_LIB to the "
                "path of libflashjit.so (or the folder holding it).")
        errors = []
        for path in paths:
            if not os.path.exists(path):
                errors.append(f"{path}: no such file")
                continue
            try:
                loaded = ctypes.CDLL(path)
            except OSError as e:
                errors.append(f"{path}: {e}")
                continue
            try:
                _lib = _declare(loaded)
                # NVRTC loads on a thread of the library's while the caller
                # sets up: a first call's cubin key names its version.
                if hasattr(_lib, "flashjit_preload_compiler"):
                    _lib.flashjit_preload_compiler()
                return _lib
            except AttributeError as e:  # another library under that name
                errors.append(f"{path}: not libflashjit.so ({e})")
        raise LibraryNotFound(
            "flashjit: could not load libflashjit.so (set FLASHJIT_LIB to the path of "
            "libflashjit.so): " + "; ".join(errors))


def preload():
    """Loads the library now, and with it NVRTC on a thread of the library's
    (flashjit_preload_compiler), so that both are ready by the first call.
    Nothing fails here: a missing or wrong library is the first call's error."""
    try:
        lib()
    except Exception:  # noqa: BLE001  (import must not fail on a warm-up)
        pass


def has_backward():
    """Whether the loaded library exports flashjit_backward."""
    return hasattr(lib(), "flashjit_backward")


def last_error():
    message = lib().flashjit_last_error()
    return message.decode("utf-8", "replace") if message else "unknown error"


def version():
    """The library's version string, e.g. "0.1.0"."""
    return lib().flashjit_version().decode()


def compile_count():
    """NVRTC compilations this process has performed (cache hits do not count)."""
    return int(lib().flashjit_compile_count())


_STAT_NAMES = ("compiles", "module_loads", "launches", "compile_ns", "compiler_wait_ns",
               "database_ns", "module_load_ns")


def runtime_stats():
    """This process's counters: compiles, module_loads, launches, and the host
    time a first call spends, in milliseconds: compile_ms (NVRTC),
    compiler_wait_ms (waiting for NVRTC to load: its version keys the
    cubins), database_ms (opening the tuning database, reading and storing
    its rows), module_load_ms (loading cubins into the CUDA context)."""
    stat = lib().flashjit_runtime_stat
    out = {}
    for name in _STAT_NAMES:
        value = int(stat(name.encode()))
        if name.endswith("_ns"):
            out[name[:-3] + "_ms"] = value / 1e6
        else:
            out[name] = value
    return out
