"""The database trust check where the Python binding opens the database
(through the C API, the library's own process database), against the
stand-in driver (tools/cuda_driver_stub.cpp: no GPU needed): a forward call
loads its stored cubin from a database only this user can write, compiles
instead from one others can write (and says so once, with the path, the
mode and the fix), and loads again under FLASHJIT_DB_TRUST=group from a
group-shared one. Each case is a fresh process: the process database is
opened once per process.

    python3 tests/python/test_db_trust_capi.py <libflashjit.so> <folder of the stub libcuda.so.1>
"""
import ctypes
import os
import stat
import subprocess
import sys
import tempfile

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_REPO, "python"))


def child(classes):
    """Runs one forward call of each class (head dims) through the C API and
    prints the NVRTC compiles this process made."""
    from flashjit import _capi
    for d in classes:
        b, s, h = 1, 64, 2
        problem = _capi.Problem(dtype=_capi.BF16, mask=_capi.MASK_CAUSAL, batch=b, heads_q=h,
                                heads_kv=h, seqlen_q=s, seqlen_k=s, head_dim_qk=d, head_dim_v=d,
                                window_left=-1, window_right=-1)
        strides = {}
        for t in ("q", "k", "v", "o"):
            strides.update({f"{t}_stride_batch": s * h * d, f"{t}_stride_seq": h * d,
                            f"{t}_stride_head": d})
        # The stand-in driver takes any address for device memory.
        args = _capi.ForwardArgs(q=0x10000000, k=0x20000000, v=0x30000000, o=0x40000000,
                                 lse=0x50000000, **strides)
        rc = _capi.lib().flashjit_forward(ctypes.byref(problem), ctypes.byref(args), None, None)
        if rc != 0:
            print(f"forward d={d}: {_capi.last_error()}")
            return 1
    print(f"compiles {_capi.compile_count()}")
    return 0


def run(library, stub, db, classes, trust=None):
    env = dict(os.environ, FLASHJIT_LIB=library, FLASHJIT_DB=db,
               LD_LIBRARY_PATH=stub + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
    env.pop("FLASHJIT_DB_TRUST", None)
    if trust:
        env["FLASHJIT_DB_TRUST"] = trust
    r = subprocess.run([sys.executable, __file__, "--child"] + [str(d) for d in classes],
                       env=env, capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout.strip(), r.stderr


def main(argv):
    library, stub = argv[1], argv[2]
    errors = []

    def expect(what, got, want):
        if got != want:
            errors.append(f"{what}: got {got!r}, expected {want!r}")

    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "db")
        os.mkdir(folder, 0o700)
        os.chmod(folder, 0o700)
        db = os.path.join(folder, "f.db")
        # Two classes: two kernels, each compiled once and stored.
        expect("first process", run(library, stub, db, [64, 32]), (0, "compiles 2", ""))
        # Only this user can write it: loaded, nothing compiled.
        expect("second process", run(library, stub, db, [64, 32]), (0, "compiles 0", ""))

        # Others can write its folder: every kernel compiled, the call
        # succeeds, and the reason is said once for both kernels.
        os.chmod(folder, 0o777)
        code, out, err = run(library, stub, db, [64, 32])
        expect("untrusted folder: exit and compiles", (code, out), (0, "compiles 2"))
        expect("untrusted folder: message", err,
               f"flashjit: warning: not loading cubins from the tuning database {db}: the "
               f"folder {folder} is writable by everyone (mode 0777). Whoever can write it "
               f"could run code in this process, so kernels are compiled instead. Fix: chmod "
               f"go-w {folder}\n")

        # Shared with this user's group deliberately.
        os.chown(folder, -1, os.getegid())
        os.chmod(folder, 0o770)
        expect("group trust", run(library, stub, db, [64, 32], trust="group"),
               (0, "compiles 0", ""))
        os.chmod(folder, 0o700)

    for e in errors:
        print("FAIL:", e)
    print("python db trust: " + ("ok" if not errors else f"{len(errors)} failures"))
    return 1 if errors else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.exit(child([int(d) for d in sys.argv[2:]]))
    sys.exit(main(sys.argv))
