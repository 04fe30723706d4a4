"""Cold first call of flashjit.attention, in fresh processes.

bf16, batch 2, 16 heads, head dim 128, causal; the first
call has seqlen 4096 and the "next new shape" seqlen 3000 (same problem class:
it should compile nothing). Each measurement runs in a new Python process with
torch's CUDA context already up, so the time is flashjit's: loading libcuda and
NVRTC, generating, compiling (or loading a cached cubin) and the launch.

A pair of processes, three pairs by default (--pairs), each with a fresh
database; the median process of each kind is reported, the first call's
time split by flashjit.runtime_stats() (NVRTC, waiting for NVRTC to load,
the database, the module load, the rest):
  cold  - an empty database (FLASHJIT_DB in a fresh folder): compiles.
  warm  - the same database again: a runtime that caches cubins in it loads
          instead of compiling (compile_count tells which happened).

    FLASHJIT_LIB=build/libflashjit.so python3 bench/first_call.py [--json out.json] [--results DIR]

Writes the suite first_call to bench/results/<gpu>/ (bench/results.py).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import results  # noqa: E402

METHOD = ("wall time of one flashjit.attention call in a fresh Python process whose torch CUDA "
          "context is up, synchronized: cold with an empty database (compiles), warm with the "
          "database the cold process left; then a new sequence length of the same class, and "
          "the same call again; the median process of three such pairs")


PHASES = ("compile_ms", "compiler_wait_ms", "database_ms", "module_load_ms")


def child(args):
    sys.path.insert(0, os.path.join(_REPO, "python"))
    import torch
    import flashjit

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.cuda.init()
    flashjit.version()  # loads libflashjit.so: part of `import`, not of the call

    def inputs(s):
        return [torch.randn(args.batch, s, args.heads, args.hdim, device="cuda", dtype=dtype)
                for _ in range(3)]

    def timed(s):
        q, k, v = inputs(s)
        torch.cuda.synchronize()
        before = flashjit.runtime_stats()
        t0 = time.perf_counter()
        flashjit.attention(q, k, v, causal=args.causal)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        after = flashjit.runtime_stats()
        # Where the time went: the library's phases (runtime_stats), the rest
        # being Python, the launch and the kernel itself.
        phases = {name: round(after[name] - before[name], 3) for name in PHASES}
        return {"seqlen": s, "ms": ms, "compiles": after["compiles"] - before["compiles"],
                "phases": phases, "rest_ms": round(ms - sum(phases.values()), 3)}

    result = {"first": timed(args.seqlen), "new_seqlen": timed(args.second_seqlen),
              "same_again": timed(args.second_seqlen), "compile_count": flashjit.compile_count()}
    print("RESULT " + json.dumps(result), flush=True)


def describe(tag, r):
    phases = ", ".join(f"{name[:-3]} {ms:.2f}" for name, ms in r["first"]["phases"].items())
    return (f"{tag:5s} | first call (seqlen {r['first']['seqlen']}): {r['first']['ms']:9.1f} ms, "
            f"{r['first']['compiles']} compile(s) | new seqlen {r['new_seqlen']['seqlen']}: "
            f"{r['new_seqlen']['ms']:7.2f} ms, {r['new_seqlen']['compiles']} compile(s) | "
            f"same again: {r['same_again']['ms']:6.2f} ms | compile_count {r['compile_count']}\n"
            f"      first call's ms: {phases}, the rest (Python, launch, kernel) "
            f"{r['first']['rest_ms']:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--second-seqlen", type=int, default=3000)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--no-causal", dest="causal", action="store_false")
    ap.add_argument("--db", help="database to use (default: a fresh one, so the first process is cold)")
    ap.add_argument("--pairs", type=int, default=3,
                    help="cold/warm pairs of processes, each pair with a fresh database; the "
                         "median process of each kind is reported (default 3)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    results.add_arguments(ap)
    args = ap.parse_args()
    if args.child:
        return child(args)
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")

    argv = [sys.executable, os.path.abspath(__file__), "--child", "--batch", str(args.batch),
            "--heads", str(args.heads), "--hdim", str(args.hdim), "--seqlen", str(args.seqlen),
            "--second-seqlen", str(args.second_seqlen), "--dtype", args.dtype]
    if not args.causal:
        argv.append("--no-causal")
    pairs = 1 if args.db else args.pairs  # a given database is cold once
    print(f"{args.dtype} b={args.batch} h={args.heads} d={args.hdim} "
          f"{'causal' if args.causal else 'full'} | {pairs} cold/warm pair(s)", flush=True)
    runs, rc = {"cold": [], "warm": []}, 0
    for _ in range(pairs):
        db = args.db or os.path.join(tempfile.mkdtemp(prefix="flashjit-first-call-"), "flashjit.db")
        env = dict(os.environ, FLASHJIT_DB=db)
        for tag in ("cold", "warm"):
            p = subprocess.run(argv, env=env, capture_output=True, text=True)
            line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
            if p.returncode != 0 or line is None:
                print(f"{tag}: failed (exit {p.returncode})\n{p.stdout[-2000:]}{p.stderr[-4000:]}",
                      flush=True)
                rc = 1
                break  # a warm process after a failed cold one would compile
            runs[tag].append(json.loads(line[len("RESULT "):]))
            print(describe(tag, runs[tag][-1]), flush=True)
    # Each kind's median process by its first call (the first pair after a
    # boot also pays the OS's first reads of NVRTC and the driver: ~1 s).
    measured = {}
    for tag, got in runs.items():
        if not got:
            measured[tag] = {"error": "no process finished"}
            continue
        median = sorted(got, key=lambda r: r["first"]["ms"])[len(got) // 2]
        measured[tag] = dict(median, first_ms_each=[round(r["first"]["ms"], 2) for r in got])
        print(f"median {describe(tag, median)}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(measured, fh, indent=1)
    if args.results and rc == 0:
        # torch only now, in this process: the children above started cold.
        import torch
        sys.path.insert(0, os.path.join(_REPO, "python"))
        import flashjit
        config = {"dtype": args.dtype, "batch": args.batch, "heads": args.heads,
                  "hdim": args.hdim, "causal": args.causal, "seqlen": args.seqlen,
                  "second_seqlen": args.second_seqlen}
        narrowed = (args.batch, args.heads, args.hdim, args.seqlen, args.second_seqlen, args.dtype,
                    args.causal, bool(args.db), args.pairs) != (2, 16, 128, 4096, 3000, "bf16",
                                                                True, False, 3)
        results.publish(args, results.suite_name(args, "first_call"),
                        [dict(process=tag, **measured[tag]) for tag in ("cold", "warm")],
                        METHOD, config, torch, flashjit.version(), narrowed)
    return rc


if __name__ == "__main__":
    sys.exit(main())
