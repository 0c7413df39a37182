"""The ``approxcv`` command refuses every bad option with one line and exit status 2.

Every case here is caught before any model is fitted (``demo`` is replaced by a stub that
fails if reached), so no JAX function is compiled and the tests take well under a second.
The full demo run is tested in ``test_api.py``.
"""
import errno
import os

import numpy as np
import pytest

from approxcv.cli import args as cli_args
from approxcv import __version__
from approxcv.cli import command as cli
from approxcv.errors import FitError, InvalidArgumentError, InvalidDataError

FILES = {
    "empty.csv": "",
    "blank.csv": "\n\n",
    "header_only.csv": "calls\n",
    "words.csv": "day,calls\n1,12\n2,many\n3,14\n",
    "bools.csv": "calls\nTrue\nFalse\nTrue\n",
    "with_nan.csv": "calls\n3\n4\nnan\n6\n",
    "with_gap.csv": "day,calls\n1,3\n2,\n3,5\n",
    "ragged.csv": "calls\n3\n4\n6,7\n",
    "negative.csv": "calls\n1\n-3\n4\n",
    "fractional.csv": "calls\n1\n2.5\n4\n",
    "one_point.csv": "calls\n5\n",
    "short.csv": "calls\n" + "\n".join(str(i % 7) for i in range(30)) + "\n",
    "binary.csv": b"\xff\xfe\x00\x81\x00\x00\xff",
    "bad.npy": b"not a numpy file",
    "truncated.npy": b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'sha",
    "strings.npy": np.array(["a", "b", "c"]),
    "matrix.npy": np.ones((20, 3)),
    "nan.npy": np.array([1.0, np.nan, 3.0]),
    "a_file": "I am a file",
}

BAD = [  # (argv after "demo", the option the one line must name)
    (["--data", "."], "--data"),
    (["--data", "subdir"], "--data"),
    (["--data", "missing.csv"], "--data"),
    (["--data", ""], "--data"),
    (["--data", "empty.csv"], "--data"),
    (["--data", "blank.csv"], "--data"),
    (["--data", "header_only.csv"], "--data"),
    (["--data", "words.csv"], "--data"),
    (["--data", "bools.csv"], "--data"),
    (["--data", "with_nan.csv"], "--data"),
    (["--data", "with_gap.csv", "--model", "gaussian-hmm"], "--data"),
    (["--data", "negative.csv"], "--data"),
    (["--data", "fractional.csv"], "--data"),
    (["--data", "one_point.csv"], "--data"),
    (["--data", "ragged.csv"], "--data"),
    (["--data", "binary.csv"], "--data"),
    (["--data", "bad.npy"], "--data"),
    (["--data", "truncated.npy"], "--data"),
    (["--data", "strings.npy"], "--data"),
    (["--data", "matrix.npy"], "--data"),  # 2-D is for gaussian-hmm only
    (["--data", "nan.npy", "--model", "gaussian-hmm"], "--data"),
    (["--n-points", "-5"], "--n-points"),
    (["--n-points", "0"], "--n-points"),
    (["--n-points", "1"], "--n-points"),
    (["--n-points", "2.5"], "--n-points"),
    (["--n-points", "many"], "--n-points"),
    (["--n-points", "99999"], "--n-points"),  # more than the shipped 27,716 points
    (["--n-points"], "--n-points"),
    (["--data", "short.csv", "--n-points", "-5"], "--n-points"),
    (["--data", "short.csv", "--n-points", "0"], "--n-points"),
    (["--data", "short.csv", "--n-points", "31"], "--n-points"),
    (["--n-exact", "0"], "--n-exact"),
    (["--n-exact", "-1"], "--n-exact"),
    (["--n-exact", "x"], "--n-exact"),
    (["--n-exact", "20", "--n-folds", "5"], "--n-exact"),
    (["--n-folds", "0"], "--n-folds"),
    (["--n-folds", "-2"], "--n-folds"),
    (["--n-folds", "1e3"], "--n-folds"),
    (["--n-folds", "100000000"], "--n-folds"),  # 1e8 folds of 500 points: terabytes
    (["--frac", "0"], "--frac"),
    (["--frac", "1"], "--frac"),
    (["--frac", "-0.1"], "--frac"),
    (["--frac", "1.5"], "--frac"),
    (["--frac", "nan"], "--frac"),
    (["--frac", "inf"], "--frac"),
    (["--frac", "ten"], "--frac"),
    (["--data", "short.csv", "--frac", "0.01"], "--frac"),  # floor(0.01 * 30) = 0 points
    (["--n-states", "0"], "--n-states"),
    (["--n-states", "-1"], "--n-states"),
    (["--n-states", "two"], "--n-states"),
    (["--data", "short.csv", "--n-states", "31"], "--n-states"),
    (["--seed", "-1"], "--seed"),
    (["--seed", "0.5"], "--seed"),
    (["--model", "hmm"], "--model"),
    (["--folds", "random"], "--folds"),
    (["--scheme", "C"], "--scheme"),
    (["--out", "a_file"], "--out"),
    (["--out", "a_file/sub"], "--out"),
    (["--out", "a_file/sub/deeper"], "--out"),
    (["--out", ""], "--out"),
    (["--unknown-option"], "--unknown-option"),
]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A temporary working directory holding FILES and a subdirectory; ``cli.demo`` fails
    if reached, so a case that is not caught up front fails instead of fitting a model."""
    for name, content in FILES.items():
        path = tmp_path / name
        if isinstance(content, np.ndarray):
            np.save(path, content)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    (tmp_path / "subdir").mkdir()
    monkeypatch.chdir(tmp_path)

    def no_fit(*args, **kwargs):
        raise AssertionError("demo reached: the bad option was not caught before fitting")
    monkeypatch.setattr(cli, "demo", no_fit)
    return tmp_path


def run(argv):
    """``cli.main(argv)`` in-process; the exit status whether returned or raised."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def assert_one_line_naming(capsys, option):
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), captured.err
    assert option in lines[0], lines[0]
    assert lines[0].startswith("approxcv")
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


@pytest.mark.parametrize("argv,option", BAD, ids=[" ".join(a) or "empty" for a, _ in BAD])
def test_bad_option_exits_2_with_one_line_naming_it(workdir, capsys, argv, option):
    out = workdir / "out"
    if "--out" not in argv:
        argv = argv + ["--out", str(out)]
    assert run(["demo", *argv, "--quiet"]) == 2
    line = assert_one_line_naming(capsys, option)
    if option != "--out":
        assert not out.exists(), "the output directory was created for a refused run"
    if option == "--n-exact":
        assert "folds" not in line.split("--n-exact", 1)[0]


def test_unreadable_data_file(workdir, capsys, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", args[0])
    monkeypatch.setattr(cli_args, "open", denied, raising=False)  # works as root too
    assert run(["demo", "--data", "short.csv", "--out", "o", "--quiet"]) == 2
    assert "Permission denied" in assert_one_line_naming(capsys, "--data")


@pytest.mark.parametrize("out", ["subdir", "subdir/new/deeper"])
def test_unwritable_out(workdir, capsys, monkeypatch, out):
    monkeypatch.setattr(cli_args.os, "access", lambda path, mode: False)  # works as root too
    assert run(["demo", "--out", out, "--quiet"]) == 2
    assert "not writable" in assert_one_line_naming(capsys, "--out")
    assert not (workdir / "subdir" / "new").exists()


def test_out_mkdir_failure_names_out(workdir, capsys, monkeypatch):
    def fail(self, *args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(cli.Path, "mkdir", fail)
    assert run(["demo", "--out", "new", "--quiet"]) == 2
    assert "No space left" in assert_one_line_naming(capsys, "--out")


def test_no_subcommand_is_one_line(capsys):
    assert run([]) == 2
    assert_one_line_naming(capsys, "command")


def test_version_prints_the_package_version(capsys):
    assert run(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"approxcv {__version__}"


def test_help_exits_0(capsys):
    assert run(["demo", "--help"]) == 0
    assert "--n-exact" in capsys.readouterr().out


@pytest.fixture
def captured_run(workdir, monkeypatch):
    """Replace ``demo`` by a recorder: returns ``(args, data)`` of the run that got through."""
    seen = {}

    def record(args, data=None):
        seen["args"], seen["data"] = args, data
        return {}
    monkeypatch.setattr(cli, "demo", record)

    def go(*argv):
        assert run(["demo", *argv, "--quiet"]) == 0
        return seen["args"], seen["data"]
    return go


def test_defaults_resolved_before_fitting(captured_run, workdir):
    args, (x, source) = captured_run("--out", "o")
    assert args.n_points == 5000 and len(x) == 5000 and source.startswith("calls")
    assert args.n_exact == 10 and args.n_folds == 1000 and (workdir / "o").is_dir()
    args, _ = captured_run("--n-folds", "4", "--out", "o")
    assert args.n_exact == 4  # the default is capped by --n-folds; an explicit value is not


def test_data_defaults_to_all_points_when_fewer_than_5000(captured_run):
    args, (x, source) = captured_run("--data", "short.csv", "--out", "o")
    assert args.n_points == 30 and len(x) == 30 and source == "short.csv"
    args, (x, _) = captured_run("--data", "short.csv", "--n-points", "12", "--out", "o")
    assert len(x) == 12


def test_headerless_csv_keeps_its_first_value(captured_run, workdir):
    (workdir / "plain.csv").write_text("5\n7\n9\n11\n13\n15\n17\n19\n21\n23\n")
    _, (x, _) = captured_run("--data", "plain.csv", "--frac", "0.2", "--out", "o")
    np.testing.assert_array_equal(x, [5, 7, 9, 11, 13, 15, 17, 19, 21, 23])


def test_nan_beyond_n_points_is_not_used(captured_run, workdir):
    _, (x, _) = captured_run("--data", "with_nan.csv", "--n-points", "2", "--frac", "0.5",
                             "--n-states", "1", "--out", "o")
    np.testing.assert_array_equal(x, [3, 4])


def test_gaussian_accepts_a_2d_npy(captured_run):
    _, (x, _) = captured_run("--data", "matrix.npy", "--model", "gaussian-hmm", "--out", "o")
    assert x.shape == (20, 3)


@pytest.mark.parametrize("err,option", [
    (InvalidDataError("`x` must hold non-negative counts, min is -3"), "--data"),
    (FitError("PoissonHMM.fit: every start gave a non-finite objective"), "--data"),
    (InvalidArgumentError("`n_states` must be >= 1, got 0"), "--n-states"),
    (InvalidArgumentError("`frac` must be in (0, 1), got 2"), "--frac"),
])
def test_approxcv_errors_during_the_run_are_one_line(workdir, capsys, monkeypatch, err, option):
    def raise_it(args, data=None):
        raise err
    monkeypatch.setattr(cli, "demo", raise_it)
    assert run(["demo", "--out", "o", "--quiet"]) == 2
    assert_one_line_naming(capsys, option)


def test_write_failure_under_out_is_one_line(workdir, capsys, monkeypatch):
    def raise_it(args, data=None):
        raise PermissionError(13, "Permission denied", os.path.join(args.out, "summary.json"))
    monkeypatch.setattr(cli, "demo", raise_it)
    assert run(["demo", "--out", "o", "--quiet"]) == 2
    assert_one_line_naming(capsys, "--out")


def test_a_full_disk_while_writing_the_results_is_one_line_naming_out(workdir, capsys,
                                                                      monkeypatch):
    def full(self, *args, **kwargs):  # a write on a full disk: no file name in the error
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(cli.Path, "write_text", full)

    def write_summary(args, data=None):  # the demo's last step, after the fits
        cli._write(cli.Path(args.out) / "summary.json", lambda p: p.write_text("{}"))
    monkeypatch.setattr(cli, "demo", write_summary)
    assert run(["demo", "--out", "o", "--quiet"]) == 2
    line = assert_one_line_naming(capsys, "--out")
    assert "summary.json" in line and os.strerror(errno.ENOSPC) in line


def test_n_folds_is_checked_against_the_memory_of_the_machine(workdir, capsys, monkeypatch):
    monkeypatch.setattr(cli_args, "_memory_bytes", lambda: 2 ** 30)
    assert run(["demo", "--data", "short.csv", "--n-folds", "1000000", "--out", "o",
                "--quiet"]) == 2
    line = assert_one_line_naming(capsys, "--n-folds")
    assert "1000000 folds of 3 points" in line and "use at most" in line
