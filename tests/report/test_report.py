"""Saved results read back exactly, and the HTML report built from them: its sections, its
embedded figures, its numbers (read from the results, nothing else), the ``approxcv report``
command's errors, and a load in headless Chromium without console errors.

The results are built directly (no model is fitted, nothing is compiled); one report is
built for the module. The demo's ``--report`` is tested with the demo run in test_api.py.
"""
import base64
import dataclasses
import json
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

import approxcv as acv
from approxcv.cli import command as cli
from approxcv.engine.fingerprint import result_fingerprint
from approxcv.errors import ArgumentTypeError, ResultFileError
from approxcv.models.hmm.poisson_hmm import PoissonHMMParams
from approxcv.report import build_report

MODEL = "PoissonHMM(n_states=2)"
SECTIONS = ("results", "skipped", "comparison", "exact", "errors", "timings", "unreliable",
            "demo")
DATA = np.arange(30.0)          # what the hand-built results say they were computed on


def _result(folds, shift, method, unreliable=(), estimate=None, seconds=1.0, data=DATA):
    """A CVResult over ``folds`` with per-unit losses ``1 + shift + 0.1 unit`` and stacked
    NamedTuple parameters; ``estimate`` becomes the per-fold error estimate; its fingerprint
    says it was computed on ``data``."""
    point_loss = [1.0 + shift + 0.1 * np.asarray(folds[i], float) for i in range(len(folds))]
    n = len(folds)
    diagnostics = {"grad_norm": 1e-9, "hessian_min_eig": np.float64(0.3), "jitter": 0.0,
                   "hessian_pd": True, "solver": "dense", "num_params": 5,
                   "unreliable_folds": folds.ids[list(unreliable)],
                   "unreliable_causes": ({"error_estimate_above_tol": folds.ids[list(unreliable)]}
                                         if len(unreliable) else {})}
    if estimate is not None:
        diagnostics.update(error_estimate=np.asarray(estimate, float), tol=0.01)
    params = PoissonHMMParams(np.full((n, 2), 0.5), np.full((n, 2, 2), 0.5),
                              np.tile([2.0, 9.0], (n, 1)) + shift)
    return acv.CVResult(
        method=method, scheme="A", level="within", folds=folds,
        fold_loss=np.array([p.sum() for p in point_loss]), point_loss=point_loss,
        params=params, params_flat=np.zeros((n, 5)), seconds=seconds,
        stage_seconds={"solve": seconds / 2, "heldout": seconds / 2}, diagnostics=diagnostics,
        fingerprint=result_fingerprint(data, folds, "within"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A result directory: IJ and NS on 12 folds, exact CV on 4 of them (all of one model),
    a demo summary.json, and its report. Returns ``(dir, {label: CVResult}, report path)``."""
    root = tmp_path_factory.mktemp("saved")
    folds = acv.folds.iid(30, 0.2, 12, seed=0)
    est = np.linspace(1e-4, 2e-3, 12)
    est[[3, 7]] = [0.05, np.inf]
    results = {"ij": _result(folds, 0.01, "ij", unreliable=(3, 7), estimate=est, seconds=0.2),
               "ns": _result(folds, 0.002, "ns", estimate=est / 10, seconds=0.9),
               "exact": _result(folds.subset(np.arange(4)), 0.0, "exact", seconds=4.0)}
    for label, res in results.items():
        res.save(root / "results" / label, model=MODEL)
    (root / "summary.json").write_text(json.dumps({"T": 30, "error_estimate": {"tol": 0.01}}))
    return root, results, build_report(root)


def _assert_same(a, b, where="result"):
    """``b`` is ``a`` read back: same types, equal values, same dtypes and shapes."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert type(a) is type(b) and (a == b or (a != a and b != b)), where


def test_save_and_load_round_trip_exactly(saved, tmp_path):
    root, results, _ = saved
    res = dataclasses.replace(results["ij"], diagnostics={
        **results["ij"].diagnostics, "nested": {"a": (1, 2.5, None), 3: [np.int32(4), "x"]},
        "nan": float("nan"), "words": np.array(["ij", "ns"])})
    path = res.save(tmp_path / "ij.npz")          # either suffix names the pair
    assert path == tmp_path / "ij.json" and (tmp_path / "ij.npz").is_file()
    back = acv.load_result(tmp_path / "ij")
    for f in dataclasses.fields(res):
        if f.name != "folds":
            _assert_same(getattr(res, f.name), getattr(back, f.name), f.name)
    assert type(back.params) is PoissonHMMParams
    np.testing.assert_array_equal(back.fold_ids, res.fold_ids)
    assert all(np.array_equal(back.folds[i], res.folds[i]) for i in range(len(res)))
    assert set(acv.load_results(root)) == {"ij", "ns", "exact"}


@dataclasses.dataclass(repr=False)
class TaggedResult(acv.CVResult):
    """A user's subclass of the result with fields of its own."""
    estimator: str = ""
    inference: str = ""
    lpd_points: np.ndarray | None = None


def test_a_subclass_round_trips_with_its_own_fields(tmp_path):
    base = _result(acv.folds.leave_one_out(5), 0.0, "la")
    res = TaggedResult(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                       estimator="la", inference="laplace", lpd_points=np.ones((2, 5)))
    back = acv.load_result(res.save(tmp_path / "la"))
    assert type(back) is TaggedResult and back.estimator == "la"
    np.testing.assert_array_equal(back.lpd_points, res.lpd_points)


def test_damaged_or_mismatched_files_are_refused(saved, tmp_path):
    root, results, _ = saved
    with pytest.raises(ResultFileError, match="does not exist"):
        acv.load_result(tmp_path / "missing")
    (tmp_path / "other.json").write_text('{"T": 3}')
    with pytest.raises(ResultFileError, match="not a saved approxcv result"):
        acv.load_result(tmp_path / "other.json")
    shutil.copy(root / "results" / "ij.json", tmp_path / "mixed.json")
    shutil.copy(root / "results" / "exact.npz", tmp_path / "mixed.npz")
    with pytest.raises(ResultFileError, match="do not belong together"):
        acv.load_result(tmp_path / "mixed")
    res = dataclasses.replace(results["exact"], diagnostics={"thing": object()})
    with pytest.raises(ArgumentTypeError, match=r"result\.diagnostics\['thing'\]"):
        res.save(tmp_path / "bad")


class _Page(HTMLParser):
    """Collects section ids, image sources, links, scripts and unclosed tags."""
    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self):
        super().__init__()
        self.ids, self.images, self.links, self.open, self.bad = [], [], [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.ids.append(a.get("id"))
        if tag == "img":
            self.images.append(a.get("src", ""))
        if tag in ("script", "link", "iframe", "object"):
            self.bad.append(tag)
        if "href" in a:
            self.links.append(a["href"])
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, (tag, self.open[-5:])
        self.open.pop()


def test_report_has_every_section_embedded_images_and_no_external_file(saved):
    root, results, path = saved
    assert path == root / "report.html"
    text = path.read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    page.close()
    assert not page.open and not page.bad
    assert tuple(page.ids) == SECTIONS
    assert all(href.startswith("#") for href in page.links)
    assert len(page.images) >= 7   # comparison, 2 scatters x 2, 2 estimate histograms, ...
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    # its numbers are the saved results' own
    table = acv.compare({k: results[k] for k in ("ij", "ns")})
    assert f"{table['elpd'].iloc[0]:.4g}" in text
    mean_fold = acv.accuracy(results["ij"], results["exact"]).attrs["mean_rel_error_fold"]
    assert f"{mean_fold:.4g}" in text
    assert "error_estimate_above_tol" in text and MODEL in text


def _report(argv, capsys):
    """Run ``approxcv report``; return its exit status and its stderr lines."""
    status = cli.main(["report", *argv])
    return status, capsys.readouterr().err.splitlines()


def test_report_command_errors_are_one_line(saved, tmp_path, capsys):
    root, _, _ = saved
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_text("x")
    damaged = tmp_path / "damaged"
    (damaged / "results").mkdir(parents=True)
    shutil.copy(root / "results" / "ns.json", damaged / "results")
    (damaged / "results" / "ns.npz").write_bytes(b"not an npz")
    for argv in ([str(tmp_path / "missing")], [str(tmp_path / "empty")],
                 [str(tmp_path / "a_file")], [str(damaged)]):
        status, err = _report(argv, capsys)
        assert status == 2 and len(err) == 1, err
        assert err[0].startswith("approxcv report: error: RESULT_DIR: "), err
    assert "ns.json" in err[0] and "sha256 differs" in err[0]   # nothing read: says why
    status, err = _report([str(root), "--out", str(tmp_path / "no" / "r.html")], capsys)
    assert status == 2 and err[0].startswith("approxcv report: error: --out: cannot write"), err
    assert _report([str(root), "--out", str(tmp_path), "--quiet"], capsys) == (0, [])
    assert (tmp_path / "report.html").stat().st_size > 10_000


def _console_messages(chromium, url, tmp_path):
    """Load ``url`` in headless Chromium; return its console lines (messages and uncaught
    exceptions, which Chromium logs to stderr) and the DOM it built."""
    run = subprocess.run(
        [chromium, "--headless=new", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr",
         "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
        capture_output=True, text=True, timeout=120)
    lines = [ln for ln in run.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]
    return lines, run.stdout


def test_report_loads_in_headless_chromium_without_console_errors(saved, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium: install Debian's `chromium` package to load the report "
                    "in a headless browser")
    control = tmp_path / "control.html"   # the check must see an error where there is one
    control.write_text("<!DOCTYPE html><html><body><script>console.error('seen');"
                       "missing()</script></body></html>")
    lines, _ = _console_messages(chromium, control.as_uri(), tmp_path)
    assert any("seen" in ln for ln in lines) and any("Uncaught" in ln for ln in lines), lines
    lines, dom = _console_messages(chromium, saved[2].as_uri(), tmp_path)
    assert lines == []
    assert all(f'id="{s}"' in dom for s in SECTIONS)


def test_report_lists_every_file_it_skips_and_why(saved, tmp_path, capsys):
    root, results, _ = saved
    where = tmp_path / "mixed"
    shutil.copytree(root, where)
    res = where / "results"
    (res / "ij.json").write_text((res / "ij.json").read_text()[:200])      # truncated
    meta = json.loads((res / "ns.json").read_text())
    meta["version"] = 99                                                     # another version
    (res / "ns.json").write_text(json.dumps(meta))
    (res / "orphan.npz").write_bytes(b"PK\x03\x04 and nothing else")
    for path in (where / "report.html", res / "report.html"):
        path.unlink(missing_ok=True)
    status, err = _report([str(where), "--quiet"], capsys)
    assert status == 0 and len(err) == 3, err                # exact was read; three skipped
    assert all(line.startswith("approxcv report: skipped ") for line in err)
    assert any("ij.json" in e and "damaged" in e for e in err)
    assert any("ns.json" in e and "version 99" in e for e in err)
    assert any("orphan.npz" in e and "no .json" in e for e in err)
    text = (where / "report.html").read_text(encoding="utf-8")
    assert "3 file(s) skipped" in text and 'id="skipped"' in text
    assert "version 99" in text and "orphan.npz" in text
    with pytest.warns(acv.errors.ResultFileWarning, match="skips 3 file"):
        build_report(where)


def test_report_pairs_only_results_computed_on_the_same_data(tmp_path):
    folds = acv.folds.iid(30, 0.2, 12, seed=0)
    ij = _result(folds, 0.01, "ij", estimate=np.full(12, 1e-3))
    other_run = _result(folds.subset(np.arange(4)), 3.0, "exact", data=DATA + 1.0)
    ij.save(tmp_path / "ij", model=MODEL)
    other_run.save(tmp_path / "exact", model=MODEL)
    with pytest.raises(acv.errors.IncomparableResultsError, match="field 'data'"):
        acv.accuracy(ij, other_run)
    text = build_report(tmp_path).read_text(encoding="utf-8")
    assert "Not compared (no relative errors shown)" in text and "field &#x27;data&#x27;" in text
    assert "mean relative error" not in text           # no relative error from the other run
    assert "estimated vs measured" not in text
    # the same data: paired and compared
    _result(folds.subset(np.arange(4)), 0.0, "exact").save(tmp_path / "exact", model=MODEL)
    text = build_report(tmp_path).read_text(encoding="utf-8")
    assert "mean relative error, per fold" in text and "Not compared" not in text


def test_report_on_a_full_disk_leaves_the_earlier_report_intact(saved, tmp_path, capsys,
                                                              monkeypatch):
    import errno
    import os
    root, _, _ = saved
    out = tmp_path / "report.html"
    out.write_text("the earlier report")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    status, err = _report([str(root), "--out", str(out)], capsys)
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith("approxcv report: error: --out: cannot write") and \
        "No space left on device (free some space" in err[0], err
    assert out.read_text() == "the earlier report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]   # no temporary


def test_results_table_names_fold_sets_and_ranks_nothing(saved):
    """The results table said nothing when an exact run on 4 folds stood beside IJ on 12,
    and its 'mean fold loss, reliable' column compared each result's own reliable subset."""
    from approxcv.report.sections import results_section
    from approxcv.results.storage import scan_results
    root, results, _ = saved
    _, _, body = results_section(scan_results(root)[0], root)
    assert "mean fold loss, reliable" not in body and "fold set" in body
    assert "2 different fold sets" in body and "not comparable" in body


def test_timing_bars_are_horizontal_linear_and_say_the_folds(tmp_path):
    import matplotlib.pyplot as plt
    from approxcv.report.plot import timing_bars
    before = plt.get_fignums()
    ax = timing_bars({"IJ": 8.0, "exact (measured)": 20.0, "exact (extrapolated)": 2000.0},
                     {"IJ": 1000, "exact (measured)": 10, "exact (extrapolated)": 1000},
                     path=tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
    assert ax.get_xscale() == "linear"
    assert sorted(t.get_text() for t in ax.get_yticklabels()) == [
        "IJ", "exact (extrapolated)", "exact (measured)"]
    notes = [t.get_text() for t in ax.texts]
    assert any("1000 folds, 0.008 s per fold" in n for n in notes)
    assert any("10 folds, 2 s per fold" in n for n in notes)
    assert plt.get_fignums() == before          # drawn outside pyplot: nothing left open
