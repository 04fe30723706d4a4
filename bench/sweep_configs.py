"""Times a list of forward configs per head dim with `flashjit run`
(one process per config, CUDA-event medians) and prints, per shape, every
config's TFLOP/s with the best first. Evidence for the heuristic's defaults
(generator/heuristic.cpp) until the tuner measures them per GPU.

    python3 bench/sweep_configs.py [--bin .device/bin/flashjit] [--hdims 64,128,256]
                                   [--path sm80|sm90|both]

`--path sm90` times the Hopper kernel's tiles (block_m 128, 12 warps: one
producer and two consumer warpgroups; at d=64 also block_m 192, 16 warps:
three; FwdSm90Traits::search_space), `both`
puts both families in one ranking.
"""
import argparse
import json
import subprocess
import sys

CONFIGS_SM80 = {
    64: ["128,128,4,2", "128,64,4,2", "128,64,4,3", "64,64,4,2", "128,128,8,2",
         "128,64,8,2", "256,64,8,2", "128,128,4,3"],
    128: ["128,64,4,2", "128,32,4,2", "128,64,4,3", "128,32,4,3", "64,64,4,2",
          "128,64,8,2", "128,128,8,2", "256,64,8,2"],
    256: ["128,64,8,2", "128,32,8,2", "64,64,4,2", "64,32,4,2", "64,64,4,3", "128,32,8,3"],
}

# block_m,block_n,warps,stages of the sm90 kernel: block_n up to the largest
# that compiled without spills, stages as shared memory allows.
CONFIGS_SM90 = {
    64: ["128,128,12,2", "128,128,12,3", "128,128,12,4", "128,112,12,2", "128,96,12,2",
         "128,80,12,3", "128,64,12,2", "128,64,12,4",
         "192,112,16,2", "192,112,16,3", "192,96,16,3", "192,80,16,4"],
    128: ["128,128,12,2", "128,128,12,3", "128,112,12,2", "128,96,12,2", "128,96,12,3",
          "128,80,12,2", "128,64,12,2", "128,64,12,3"],
    256: ["128,80,12,2", "128,64,12,2", "128,48,12,2", "128,48,12,3"],
}


def run(binary, d, causal, seqlen, config):
    path, config = config.split(":")
    m, n, w, s = config.split(",")
    cmd = [binary, "run", "--json", f"--hdim={d}", f"--heads={2048 // d}",
           f"--batch={16384 // seqlen}", f"--seqlen={seqlen}", "--mask", "causal" if causal else "none",
           f"--block-m={m}", f"--block-n={n}", f"--warps={w}", f"--stages={s}", "--repeats=30",
           f"--path={path}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr or p.stdout).strip().splitlines()[-1][:100]
    return json.loads(p.stdout)["tflops"], ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=".device/bin/flashjit")
    ap.add_argument("--hdims", default="64,128,256")
    ap.add_argument("--seqlens", default="1024,8192")
    ap.add_argument("--path", default="sm80", choices=["sm80", "sm90", "both"])
    args = ap.parse_args()
    paths = ["sm80", "sm90"] if args.path == "both" else [args.path]
    for d in map(int, args.hdims.split(",")):
        for causal in (False, True):
            for seqlen in map(int, args.seqlens.split(",")):
                rows = []
                configs = [f"{p}:{c}" for p in paths
                           for c in (CONFIGS_SM80 if p == "sm80" else CONFIGS_SM90)[d]]
                for c in configs:
                    tflops, err = run(args.bin, d, causal, seqlen, c)
                    rows.append((tflops or 0.0, c, err))
                rows.sort(reverse=True)
                cells = " ".join(f"{c}:{t:.0f}" if t else f"{c}:ERR({e})" for t, c, e in rows)
                print(f"d={d} {'causal' if causal else 'full  '} s={seqlen:5d} | {cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
