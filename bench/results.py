"""Result files: one per benchmark suite and GPU, bench/results/<gpu>/<suite>.json.

Every benchmark writes its suite through `publish` (or `write_suite`), and
bench/report.py turns the files into docs/PERF.md. A record:

    suite    the suite's name (grid_fwd, decode, ...)
    date     when it was measured, UTC, ISO 8601
    commit   the flashjit commit measured (see `library_commit`)
    gpu, driver, torch, cudnn, cuda
             the machine and the software the anchors ran on (null: unknown)
    method   what the numbers are (kernel time, call latency, ...)
    config   the run's parameters and its command line
    rows     the benchmark's own rows, as its --json writes them
and, for some suites, extras (serving: the workload, the padded cuDNN run).

Writing needs neither torch nor a GPU (bench/test_report.py writes fake rows),
so the shell benchmarks use it too:

    ... | python3 bench/results.py --suite deterministic --columns a,b,c --method TEXT

reads rows of " | "-separated cells from stdin (numbers become numbers).
"""
import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(REPO, "bench", "results")
# The order of a record's keys in its file.
KEYS = ("suite", "date", "commit", "gpu", "driver", "torch", "cudnn", "cuda", "method", "config",
        "rows")


def gpu_slug(name):
    """The results folder of a GPU: 'NVIDIA H100 80GB HBM3' -> 'h100',
    'NVIDIA H200' -> 'h200', 'NVIDIA A100-SXM4-80GB' -> 'a100', 'NVIDIA
    GeForce RTX 4090' -> 'rtx-4090'."""
    words = re.sub(r"\b(nvidia|geforce|tesla)\b", " ", (name or "").lower()).split()
    if not words:
        return "unknown-gpu"
    product = re.match(r"[a-z]+\d+[a-z]?", words[0])
    if product:
        return product.group(0)
    return re.sub(r"[^a-z0-9]+", "-", " ".join(words)).strip("-") or "unknown-gpu"


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _git_commit(repo):
    if not os.path.exists(os.path.join(repo, ".git")):
        return None
    try:
        out = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def library_commit(version=None, environ=None, repo=REPO):
    """The commit of the library measured, first found of:
    $FLASHJIT_COMMIT (say which build it is when it is not the checkout's);
    the COMMIT file scripts/build-device-bundle.sh writes beside the bundle's
    lib/ (the library $FLASHJIT_LIB names); `git rev-parse` of the checkout;
    the library's version string ("v0.1.0"); else None."""
    environ = os.environ if environ is None else environ
    if environ.get("FLASHJIT_COMMIT"):
        return environ["FLASHJIT_COMMIT"].strip()
    lib = environ.get("FLASHJIT_LIB")
    if lib:
        stamp = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(lib))), "COMMIT")
        if os.path.isfile(stamp):
            with open(stamp) as fh:
                text = fh.read().strip()
            if text:
                return text
    return _git_commit(repo) or (f"v{version}" if version else None)


def _nvidia_smi(field, index=0):
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader",
                              "-i", str(index)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def cudnn_text(version):
    """torch.backends.cudnn.version()'s integer as a version: 91900 -> '9.19.0'
    (cuDNN 9: major*10000 + minor*100 + patch), 8902 -> '8.9.2' (cuDNN 8)."""
    if version is None:
        return None
    v = int(version)
    if v >= 10000:
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def environment(torch=None):
    """{"gpu", "driver", "torch", "cudnn", "cuda"} of the current device: from
    torch where the caller passes it, the GPU's name and the driver from
    nvidia-smi otherwise (None where neither answers)."""
    env = {"gpu": None, "driver": None, "torch": None, "cudnn": None, "cuda": None}
    index = 0
    if torch is not None:
        index = torch.cuda.current_device()
        env["gpu"] = torch.cuda.get_device_name(index)
        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        env["cudnn"] = cudnn_text(torch.backends.cudnn.version())
    env["gpu"] = env["gpu"] or _nvidia_smi("name", index)
    env["driver"] = _nvidia_smi("driver_version", index)
    return env


def clean(value):
    """JSON without NaN or infinity (null instead): strict parsers read it."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def make_record(suite, rows, method, env, commit, config=None, date=None, extras=None):
    record = {"suite": suite, "date": date or utc_now(), "commit": commit}
    record.update({k: env.get(k) for k in ("gpu", "driver", "torch", "cudnn", "cuda")})
    record.update({"method": method, "config": config or {}, "rows": rows})
    for key, value in (extras or {}).items():
        if key in record:
            raise ValueError(f"extra field {key!r} would replace the record's own")
        record[key] = value
    return clean(record)


def suite_path(results_dir, gpu, suite):
    return os.path.join(results_dir, gpu_slug(gpu), f"{suite}.json")


def write_suite(results_dir, record):
    """Writes `record` to <results_dir>/<gpu slug>/<suite>.json, replacing the
    suite's last result on that GPU; returns the path."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", record.get("suite") or ""):
        raise ValueError(f"suite name {record.get('suite')!r}: lower-case letters, digits, _ and -")
    path = suite_path(results_dir, record.get("gpu"), record["suite"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(record, fh, indent=1, allow_nan=False)
        fh.write("\n")
    os.replace(tmp, path)
    return path


def read_suite(path):
    with open(path) as fh:
        return json.load(fh)


def add_arguments(parser):
    """--results and --suite, the same in every benchmark."""
    parser.add_argument("--results", default=DEFAULT_DIR, metavar="DIR",
                        help="write the suite's result file to DIR/<gpu>/<suite>.json "
                             "(default: bench/results; '' writes none)")
    parser.add_argument("--suite", default="", metavar="NAME",
                        help="the result file's suite name (default: the benchmark's own; "
                             "a run narrowed by its selection flags writes one only when named)")


def command_line():
    """The benchmark's command line as run, from the repository root,
    without where it wrote its files (--results, --json: paths of the
    machine that ran it, which do not change what was measured)."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPO)
    args, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a in ("--results", "--json"):
            skip = True
        elif not a.startswith(("--results=", "--json=")):
            args.append(a)
    return " ".join([script] + args)


def suite_name(args, default, part=""):
    """The result file's suite: the benchmark's own name (`default`), or the
    caller's --suite; `part` tells a benchmark's several suites apart
    (grid_fwd and grid_bwd, decode and decode_paged)."""
    base = getattr(args, "suite", "") or default
    return f"{base}_{part}" if part else base


def publish(args, suite, rows, method, config=None, torch=None, version=None, narrowed=False,
            extras=None, date=None):
    """Writes one suite's result file where args.results says, with this
    process's environment; returns the path, or None when nothing was
    written: --results '' or a run narrowed by its flags (a custom grid, a
    subset of rows) without a --suite name, so that it cannot replace the
    suite's full result."""
    if not getattr(args, "results", None):
        return None
    if narrowed and not getattr(args, "suite", ""):
        print(f"no result file for {suite}: the run is narrowed by its flags (name it with --suite)",
              flush=True)
        return None
    config = dict(config or {}, command=command_line())
    record = make_record(suite, rows, method, environment(torch), library_commit(version), config,
                         date, extras)
    path = write_suite(args.results, record)
    print(f"wrote {os.path.relpath(path)}", flush=True)
    return path


def _cell(text):
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def main(argv=None):
    ap = argparse.ArgumentParser(description="Writes a suite's result file from rows of "
                                             "' | '-separated cells on stdin.")
    ap.add_argument("--suite", required=True)
    ap.add_argument("--columns", required=True, help="comma list: the cells' names, in order")
    ap.add_argument("--method", required=True)
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--results", default=DEFAULT_DIR)
    ap.add_argument("--gpu", help="the GPU's name (default: nvidia-smi's)")
    args = ap.parse_args(argv)
    columns = args.columns.split(",")
    rows = []
    for line in sys.stdin:
        if not line.strip():
            continue
        cells = [_cell(c) for c in line.rstrip("\n").split(" | ")]
        if len(cells) != len(columns):
            ap.error(f"{len(cells)} cells, {len(columns)} columns: {line.strip()}")
        rows.append(dict(zip(columns, cells)))
    env = environment()
    if args.gpu:
        env["gpu"] = args.gpu
    config = dict(kv.split("=", 1) for kv in args.config)
    record = make_record(args.suite, rows, args.method, env, library_commit(), config)
    print(f"wrote {os.path.relpath(write_suite(args.results, record))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
