"""flashjit.query, flashjit.tune and flashjit.precompile: the `flashjit`
command's query, tune and precompile from Python, with the command's meaning,
returning its JSON report as plain dicts, so a training script can pre-tune
its shapes before its first step:

    flashjit.tune(heads=32, heads_kv=8, seqlen=4096, hdim=128, causal=True)
    flashjit.query(heads=32, heads_kv=8, seqlen=4096, hdim=128, causal=True)["config"]
    flashjit.precompile(arch="sm_90a", plan="plans/llama.yaml")   # no GPU needed

They run the `flashjit` executable (tuning already runs each candidate in a
worker process, so that a faulting kernel cannot take the caller down), found
at $FLASHJIT_CLI, inside the installed package (flashjit/bin/flashjit), in the
repository's build/ folder, then on PATH. Keyword arguments are the command's
flags with dashes as underscores (heads_kv=8 is --heads-kv 8; True is a bare
flag, False and None leave it out); `db` picks the database (default
$FLASHJIT_DB, else the command's default). A failing command raises
FlashjitCommandError with its message. A caller's modifiers:
score_mod / score_mod_grad / mask_mod as CUDA source (or a file's path, or
a flashjit.mods object) and aux as declarations, e.g.
flashjit.precompile(arch="sm_90a", hdim=128, mask_mod=text, aux="const int* doc_ids");
a tune runs them with aux_values={"prefix": 1024} for its scalar fields (the
pointer fields get generated arrays), e.g.
flashjit.tune(hdim=128, seqlen=8192, mask_mod=text, aux="int prefix", aux_values={"prefix": 1024}).
"""
import json
import os
import shutil
import subprocess
import tempfile

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_ROOT = os.path.dirname(os.path.dirname(_PACKAGE_DIR))


class FlashjitCommandError(RuntimeError):
    """The flashjit command failed: its message, and the command line."""


def cli_candidates():
    """Where the flashjit executable is looked for, in order."""
    env = os.environ.get("FLASHJIT_CLI")
    if env:
        return [env]  # when set, the only candidate: a wrong value must not fall back
    out = [os.path.join(_PACKAGE_DIR, "bin", "flashjit"),
           os.path.join(_REPO_ROOT, "build", "flashjit")]
    on_path = shutil.which("flashjit")
    if on_path:
        out.append(on_path)
    return out


def _cli():
    candidates = cli_candidates()
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FlashjitCommandError(
        "the flashjit executable was not found; tried: " + ", ".join(candidates) +
        " (install the wheel, build the repository, or set FLASHJIT_CLI)")


def _flags(options):
    args = []
    for key, value in options.items():
        if key == "mask_mod_qk_only" and value is False:
            # Explicit: a block map per (batch, head), whatever the probe
            # would find (absent, the library finds out).
            args.append("--mask-mod-qk-only=false")
            continue
        if value is None or value is False:
            continue
        if key == "aux_values":  # {"prefix": 1024}: one --aux-value NAME=VALUE each
            args += [f"--aux-value={name}={v}" for name, v in dict(value).items()]
            continue
        flag = "--" + key.rstrip("_").replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args.append(f"{flag}={','.join(str(v) for v in value)}")
        else:
            args.append(f"{flag}={value}")
    return args


# The flags that take a CUDA snippet's file.
_SNIPPET_FLAGS = ("score_mod", "score_mod_grad", "mask_mod")


def _snippet_files(options, folder):
    """options with each snippet given as CUDA source text (or a
    flashjit.mods object, its text) written to a file in `folder`; a path
    passes through."""
    out = dict(options)
    for key in _SNIPPET_FLAGS:
        value = out.get(key)
        text = getattr(value, key, None)  # a flashjit.mods.Modifier
        if text is None and isinstance(value, str) and ("\n" in value or "__device__" in value):
            text = value
        if text is not None:
            path = os.path.join(folder, key + ".cu")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            out[key] = path
    return out


def run_command(command, options, timeout=None):
    """Runs `flashjit <command> --json <flags>` and returns its JSON report.
    score_mod, score_mod_grad and mask_mod take a file's path or the CUDA
    source itself; aux the declarations ("const int* doc_ids")."""
    with tempfile.TemporaryDirectory(prefix="flashjit-snippets-") as folder:
        argv = [_cli(), command, "--json"] + _flags(_snippet_files(options, folder))
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise FlashjitCommandError(
                f"`{' '.join(argv)}` did not finish in {timeout} s") from None
    if done.returncode != 0:
        message = done.stderr.strip().splitlines()
        raise FlashjitCommandError(
            (message[-1] if message else f"exit code {done.returncode}") + f" (`{' '.join(argv)}`)")
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise FlashjitCommandError(f"`{' '.join(argv)}` printed no JSON report: "
                                   f"{done.stdout[:200]!r}") from None


def query(**options):
    """The config a problem gets and why (`flashjit query`): the problem, its
    tuning class, the config, the kernel ID, where it came from and notes.
    Without a GPU pass arch="sm_90a" (or another target)."""
    return run_command("query", options)


def tune(timeout=None, **options):
    """Tunes a problem class, or a plan's (plan="file.yaml"), on this machine's
    GPU and stores the winners (`flashjit tune`); returns one entry per
    problem with the winner, its time and the heuristic's."""
    return run_command("tune", options, timeout=timeout)


def precompile(timeout=None, **options):
    """Compiles every candidate of a problem class, or a plan's, for `arch`
    into the database's cubin store, with no GPU (`flashjit precompile`)."""
    return run_command("precompile", options, timeout=timeout)
