"""Tests of the result files and the page made from them, without torch or a
GPU: bench/results.py writes fake rows, bench/report.py renders and checks.

    python3 bench/test_report.py
"""
import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import report  # noqa: E402
import results  # noqa: E402

ENV = {"gpu": "NVIDIA H200", "driver": "580.95", "torch": "2.11.0+cu130", "cudnn": "9.19.0",
       "cuda": "13.0"}


def grid_row(d, causal, s, ours, cudnn, flash):
    return {"hdim": d, "causal": causal, "seqlen": s, "batch": 16384 // s, "heads": 2048 // d,
            "ours": {"tflops": ours}, "cudnn": {"tflops": cudnn}, "flash": {"tflops": flash}}


def fake_grid(commit="abc1234", ours=500.0):
    rows = [grid_row(64, False, 512, ours, 400.0, 250.0), grid_row(64, True, 512, 300.0, 300.0, 150.0),
            grid_row(128, False, 512, 640.0, 320.0, float("nan"))]
    return results.make_record("grid_fwd", rows, "kernel time", ENV, commit,
                               {"dtype": "bf16", "repeats": 20, "warmup": 5,
                                "command": "bench/compare.py"}, "2026-12-06T04:18:46Z")


REFUSED = "ValueError: kv_dtype=e4m3 under 16-bit queries is not served yet"


def fake_fp8_fwd():
    def row(d, causal, s, fp8, bf16, cudnn):
        return {"hdim": d, "causal": causal, "seqlen": s, "batch": 16384 // s, "heads": 2048 // d,
                "ours_fp8": fp8, "ours_bf16": bf16, "cudnn_fp8": cudnn}
    rows = [row(128, False, 16384, {"tflops": 1100.0, "rmse": 2e-3}, {"tflops": 700.0, "rmse": 5e-4},
                {"tflops": 1000.0}),
            row(128, True, 16384, {"tflops": 950.0, "rmse": 2.1e-3}, {"tflops": 600.0, "rmse": 6e-4},
                {"error": "RuntimeError: no plan"}),
            row(256, False, 4096, {"error": REFUSED, "unsupported": True},
                {"tflops": 650.0, "rmse": 3e-4}, None)]
    return results.make_record("fp8_fwd", rows, "kernel time", ENV, "abc1234",
                               {"cudnn_fp8": {"path": "cudnn-frontend sdpa_fp8",
                                              "version": "frontend 1.16.0, backend 91900"},
                                "repeats": 20, "warmup": 5, "command": "bench/fp8.py"},
                               "2026-12-07T04:18:46Z")


def fake_fp8_decode(all_refused=False):
    refused = {"error": REFUSED, "unsupported": True}

    def row(b, fp8, bf16, p64, p16):
        return {"batch": b, "seqlen_k": 8192, "heads_q": 32, "heads_kv": 8, "hdim": 128,
                "fp8": fp8, "bf16": bf16, "p64": p64, "p16": p16}
    rows = [row(1, refused, {"ms": 0.02, "gbs": 3355.4}, refused, refused)]
    if all_refused:
        rows.append(row(8, refused, {"ms": 0.018, "gbs": 3728.0}, refused, refused))
    else:
        rows.append(row(8, {"ms": 0.01, "gbs": 3355.4}, {"ms": 0.018, "gbs": 3728.0},
                        {"gbs": 3300.0}, {"gbs": 3100.0}))
    return results.make_record("fp8_decode", rows, "kernel time", ENV, "abc1234",
                               {"pages": [64, 16], "command": "bench/fp8.py"},
                               "2026-12-07T04:18:46Z")


README = "# x\n\n## Performance\n\n" + report.README_BEGIN + "\nold\n" + report.README_END + \
    "\n\n## Quick start\n"


class ResultFiles(unittest.TestCase):
    def test_gpu_slug(self):
        self.assertEqual(results.gpu_slug("NVIDIA H200"), "h200")
        self.assertEqual(results.gpu_slug("NVIDIA H100 80GB HBM3"), "h100")
        self.assertEqual(results.gpu_slug("NVIDIA A100-SXM4-80GB"), "a100")
        self.assertEqual(results.gpu_slug("NVIDIA GeForce RTX 4090"), "rtx-4090")
        self.assertEqual(results.gpu_slug("NVIDIA GH200 480GB"), "gh200")
        self.assertEqual(results.gpu_slug(None), "unknown-gpu")

    def test_cudnn_versions(self):
        self.assertEqual(results.cudnn_text(91900), "9.19.0")
        self.assertEqual(results.cudnn_text(8902), "8.9.2")
        self.assertIsNone(results.cudnn_text(None))

    def test_write_suite_places_the_record_by_gpu_and_suite(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = results.write_suite(tmp, fake_grid())
            self.assertEqual(path, os.path.join(tmp, "h200", "grid_fwd.json"))
            with open(path) as fh:
                text = fh.read()
            self.assertNotIn("NaN", text)  # strict JSON: NaN becomes null
            rec = json.loads(text)
            self.assertEqual(list(rec)[:11], list(results.KEYS))
            self.assertIsNone(rec["rows"][2]["flash"]["tflops"])
            self.assertEqual(rec["commit"], "abc1234")
            self.assertEqual(rec["driver"], "580.95")

    def test_write_suite_refuses_a_bad_suite_name(self):
        rec = fake_grid()
        rec["suite"] = "../grid"
        with tempfile.TemporaryDirectory() as tmp, self.assertRaises(ValueError):
            results.write_suite(tmp, rec)

    def test_extras_may_not_replace_fields(self):
        with self.assertRaises(ValueError):
            results.make_record("serving", [], "m", ENV, "c", extras={"rows": []})

    def test_commit_from_environment_bundle_then_version(self):
        with tempfile.TemporaryDirectory() as tmp:
            no_git = os.path.join(tmp, "tree")
            os.makedirs(no_git)
            self.assertEqual(results.library_commit("0.1.0", {"FLASHJIT_COMMIT": "f00"}, no_git),
                             "f00")
            os.makedirs(os.path.join(tmp, "bundle", "lib"))
            with open(os.path.join(tmp, "bundle", "COMMIT"), "w") as fh:
                fh.write("b4d-dirty\n")
            lib = os.path.join(tmp, "bundle", "lib", "libflashjit.so")
            self.assertEqual(results.library_commit("0.1.0", {"FLASHJIT_LIB": lib}, no_git),
                             "b4d-dirty")
            self.assertEqual(results.library_commit("0.1.0", {}, no_git), "v0.1.0")
            self.assertIsNone(results.library_commit(None, {}, no_git))

    def test_publish_writes_only_full_or_named_runs(self):
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
            args = argparse.Namespace(results=tmp, suite="")
            self.assertIsNone(results.publish(args, "grid_fwd", [], "m", narrowed=True))
            self.assertFalse(os.path.exists(os.path.join(tmp, "unknown-gpu")))
            path = results.publish(args, "grid_fwd", [{"x": 1.5}], "m", {"repeats": 20},
                                   version="0.1.0")
            rec = results.read_suite(path)
            self.assertEqual(rec["rows"], [{"x": 1.5}])
            self.assertEqual(rec["config"]["repeats"], 20)
            self.assertIn("command", rec["config"])
            named = argparse.Namespace(results=tmp, suite="hdims")
            self.assertEqual(results.suite_name(named, "grid", "fwd"), "hdims_fwd")
            self.assertIsNotNone(results.publish(named, "hdims_fwd", [], "m", narrowed=True))
            self.assertIsNone(results.publish(argparse.Namespace(results="", suite=""),
                                              "grid_fwd", [], "m"))


class Report(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        root = self.tmp.name
        self.results = os.path.join(root, "results")
        self.perf = os.path.join(root, "PERF.md")
        self.readme = os.path.join(root, "README.md")
        results.write_suite(self.results, fake_grid())
        with open(self.readme, "w") as fh:
            fh.write(README)
        self.argv = ["--results", self.results, "--perf-md", self.perf, "--readme", self.readme]

    def tearDown(self):
        self.tmp.cleanup()

    def run_report(self, *extra):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = report.main(self.argv + list(extra))
        return rc, out.getvalue()

    def test_tables_carry_provenance_ratios_and_means(self):
        self.assertEqual(self.run_report()[0], 0)
        with open(self.perf) as fh:
            page = fh.read()
        self.assertIn("*NVIDIA H200 · measured 2026-12-06 · flashjit abc1234 · driver 580.95 · "
                      "torch 2.11.0+cu130 · CUDA 13.0 · cuDNN 9.19.0*", page)
        # d=64 512: full 500 / 400 = 1.25 x cuDNN, 2.00 x FA2; causal 1.00, 2.00.
        self.assertIn("| 64 | 512 | 32 × 32 | 500.0 | 400.0 | 250.0 | 1.25 | 2.00 | 300.0 | 300.0 | "
                      "150.0 | 1.00 | 2.00 |", page)
        # A NaN anchor is n/a, and a mask not measured is n/a too.
        self.assertIn("| 128 | 512 | 32 × 16 | 640.0 | 320.0 | n/a | 2.00 | n/a | n/a |", page)
        # Geometric mean over cuDNN: (1.25 * 1.0 * 2.0) ** (1/3).
        self.assertIn(f"flashjit / cuDNN **{(1.25 * 2.0) ** (1 / 3):.3f}**", page)
        with open(self.readme) as fh:
            readme = fh.read()
        self.assertNotIn("\nold\n", readme)
        self.assertIn("| forward, training grid | 1.36× cuDNN, 2.00× FA2 |", readme)
        self.assertTrue(readme.endswith("## Quick start\n"))

    def page_and_readme(self):
        self.assertEqual(self.run_report()[0], 0)
        with open(self.perf) as fh, open(self.readme) as gh:
            return fh.read(), gh.read()

    def test_no_fp8_lines_without_fp8_results(self):
        page, readme = self.page_and_readme()
        self.assertNotIn("fp8", page)
        self.assertNotIn("fp8", readme)

    def test_fp8_forward_table_ratios_refusals_and_summary(self):
        results.write_suite(self.results, fake_fp8_fwd())
        page, readme = self.page_and_readme()
        self.assertIn("### FP8 forward (e4m3)", page)
        self.assertIn("cuDNN's fp8 attention (cudnn-frontend sdpa_fp8, frontend 1.16.0, "
                      "backend 91900)", page)
        # 1100 / 700 = 1.57 x bf16, 1100 / 1000 = 1.10 x cuDNN; causal 950 / 600 = 1.58, its
        # cuDNN cell an error (n/a).
        self.assertIn("| 128 | 16384 | 1 × 16 | 1100.0 | 1.57 | 1.10 | 2.0e-03 / 5.0e-04 | "
                      "950.0 | 1.58 | n/a | 2.1e-03 / 6.0e-04 |", page)
        # The refused fp8 call says so; the mask not measured is n/a.
        self.assertIn("| 256 | 4096 | 4 × 8 | *refused* | n/a | n/a | n/a / 3.0e-04 | n/a | n/a | "
                      "n/a | n/a / n/a |", page)
        self.assertIn(f"the library refused the call on this build (`{REFUSED}`)", page)
        bf16 = (1100 / 700 * 950 / 600) ** 0.5
        self.assertIn(f"fp8 / bf16 **{bf16:.3f}**", page)
        self.assertIn(f"| fp8 forward (e4m3) | {bf16:.2f}× our bf16, 1.10× cuDNN fp8 |", readme)
        self.assertIn("The fp8 rows: flashjit's e4m3 kernels", readme)

    def test_fp8_decode_table_marks_the_refused_cache(self):
        results.write_suite(self.results, fake_fp8_decode())
        page, readme = self.page_and_readme()
        self.assertIn("### Decode over an fp8 KV cache", page)
        self.assertIn("| batch × keys | fp8 GB/s | % of 4.80 TB/s | bf16 GB/s | × bf16 | page 64 | "
                      "× contiguous | page 16 | × contiguous |", page)
        # 3355 GB/s is 70 % of 4.8 TB/s; 0.018 ms / 0.01 ms = 1.80 x the bf16 cache.
        self.assertIn("| 8 × 8192 | 3355 | 70 | 3728 | 1.80 | 3300 | 0.98 | 3100 | 0.92 |", page)
        self.assertIn("| 1 × 8192 | *refused* | n/a | 3355 | n/a | *refused* | n/a | *refused* | "
                      "n/a |", page)
        self.assertIn("fp8 / bf16 cache (time) **1.800**", page)
        self.assertIn("| decode, fp8 KV cache | 1.80× the bf16 cache's speed at batch ≥ 8 |", readme)

    def test_fp8_decode_refused_everywhere_is_said_in_the_summary(self):
        results.write_suite(self.results, fake_fp8_decode(all_refused=True))
        page, readme = self.page_and_readme()
        self.assertIn("| decode, fp8 KV cache | refused by the library |", readme)
        self.assertNotIn("fp8 / bf16 cache (time) **", page)

    def test_output_is_the_same_twice(self):
        self.run_report()
        with open(self.perf) as fh:
            first = fh.read()
        self.run_report()
        with open(self.perf) as fh:
            self.assertEqual(first, fh.read())

    def test_check_fails_on_a_stale_page_and_shows_the_diff(self):
        self.run_report()
        self.assertEqual(self.run_report("--check")[0], 0)
        results.write_suite(self.results, fake_grid(commit="def5678", ours=510.0))
        rc, out = self.run_report("--check")
        self.assertEqual(rc, 1)
        self.assertIn("+*NVIDIA H200 · measured 2026-12-06 · flashjit def5678", out)
        self.assertIn("-*NVIDIA H200 · measured 2026-12-06 · flashjit abc1234", out)

    def test_check_fails_on_a_hand_edited_readme(self):
        self.run_report()
        with open(self.readme) as fh:
            text = fh.read()
        with open(self.readme, "w") as fh:
            fh.write(text.replace("1.36×", "1.40×"))
        self.assertEqual(self.run_report("--check")[0], 1)

    def test_add_takes_a_gpu_machines_files_in(self):
        incoming = os.path.join(self.tmp.name, "incoming")
        rec = fake_grid(commit="0ff1ce")
        rec["gpu"] = "NVIDIA H100 80GB HBM3"
        results.write_suite(incoming, rec)
        self.assertEqual(self.run_report("--add", incoming)[0], 0)
        self.assertTrue(os.path.exists(os.path.join(self.results, "h100", "grid_fwd.json")))
        with open(self.perf) as fh:
            page = fh.read()
        self.assertIn("## NVIDIA H100 80GB HBM3", page)
        # The H200 (the reference GPU) leads; the H100's grid is named under it.
        self.assertLess(page.index("## NVIDIA H200"), page.index("## NVIDIA H100 80GB HBM3"))
        self.assertIn("Forward, training grid (`bench/results/h100/grid_fwd.json`)", page)

    def test_a_file_whose_name_is_not_its_suite_is_refused(self):
        os.rename(os.path.join(self.results, "h200", "grid_fwd.json"),
                  os.path.join(self.results, "h200", "grid_bwd.json"))
        with self.assertRaises(SystemExit):
            self.run_report()


class TheRepositorysPage(unittest.TestCase):
    def test_docs_perf_md_is_what_the_results_give(self):
        """The CI check itself, here too: docs/PERF.md and README.md's summary
        against bench/results/."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = report.main(["--check"])
        self.assertEqual(rc, 0, out.getvalue()[-3000:])
        # One section a suite (a suite measured on several GPUs once): the
        # page holds current numbers, not a history; ~25 lines a suite.
        with open(report.PERF_MD) as fh:
            self.assertLessEqual(fh.read().count("\n"), 450)


if __name__ == "__main__":
    unittest.main()
