"""Saving and loading results when things go wrong: a save killed between its writes, a full
disk, a read-only or missing folder, damaged files. Every failure is a named error that says
what to fix, and a failed save leaves the earlier result loadable and unchanged.

Results are built by hand (nothing is fitted or compiled).
"""
import errno
import json
import os
import warnings

import numpy as np
import pytest

import approxcv as acv
from approxcv.results import storage as results_io
from approxcv.errors import ResultFileError, ResultFileWarning, ResultWriteError


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no ``except Exception`` sees it."""


def _result(shift: float, n: int = 6):
    """A LOO result on ``n`` units with losses ``shift + unit`` (same shapes for any shift)."""
    folds = acv.folds.leave_one_out(n)
    loss = shift + np.arange(n, dtype=float)
    return acv.CVResult(method="ij", scheme="A", level="within", folds=folds, fold_loss=loss,
                        point_loss=[np.array([v]) for v in loss], params=np.zeros((n, 2)),
                        params_flat=np.zeros((n, 2)), seconds=float(shift),
                        diagnostics={"unreliable_folds": [], "run": float(shift)})


def _loss(path):
    return acv.load_result(path).fold_loss[0]


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_a_save_killed_before_its_commit_leaves_the_old_result(tmp_path, monkeypatch):
    _result(1.0).save(tmp_path / "r")
    real = results_io.write_atomic

    def killed_at_json(path, data):
        if str(path).endswith(".json"):
            raise _Killed
        return real(path, data)
    monkeypatch.setattr(results_io, "write_atomic", killed_at_json)
    with pytest.raises(_Killed):
        _result(2.0).save(tmp_path / "r")       # new arrays written, its .json not
    monkeypatch.undo()
    back = acv.load_result(tmp_path / "r")     # the old metadata with the old arrays
    assert back.fold_loss[0] == 1.0 and back.diagnostics["run"] == 1.0
    _result(3.0).save(tmp_path / "r")          # the next save clears what the kill left
    assert _loss(tmp_path / "r") == 3.0 and _names(tmp_path) == ["r.json", "r.npz"]


def test_a_save_killed_after_its_commit_loads_as_the_new_result(tmp_path, monkeypatch):
    _result(1.0).save(tmp_path / "r")
    real = os.replace

    def killed_at_npz(src, dst):
        if str(dst).endswith(".npz"):
            raise _Killed
        return real(src, dst)
    monkeypatch.setattr(os, "replace", killed_at_npz)
    with pytest.raises(_Killed):
        _result(2.0).save(tmp_path / "r")      # new .json in place, arrays still pending
    monkeypatch.undo()
    back = acv.load_result(tmp_path / "r")     # never the new metadata with the old arrays
    assert back.fold_loss[0] == 2.0 and back.diagnostics["run"] == 2.0


def test_metadata_and_arrays_of_two_saves_are_never_paired(tmp_path):
    _result(1.0).save(tmp_path / "a")
    _result(2.0).save(tmp_path / "b")          # the same dtypes and shapes, other values
    (tmp_path / "a.npz").write_bytes((tmp_path / "b.npz").read_bytes())
    with pytest.raises(ResultFileError, match="sha256 differs.*do not belong together"):
        acv.load_result(tmp_path / "a")


def _full_disk(fd):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_save_on_a_full_disk_leaves_the_old_result(tmp_path, monkeypatch):
    _result(1.0).save(tmp_path / "r")
    monkeypatch.setattr(os, "fsync", _full_disk)
    with pytest.raises(ResultWriteError, match="No space left on device.*free some space"):
        _result(2.0).save(tmp_path / "r")
    monkeypatch.undo()
    assert _loss(tmp_path / "r") == 1.0 and _names(tmp_path) == ["r.json", "r.npz"]


def test_a_save_into_a_read_only_folder_says_so(tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    _result(1.0).save(folder / "r")
    if os.geteuid() == 0:                      # root writes anyway: refuse as the OS would
        def denied(*args, **kwargs):
            raise PermissionError(errno.EACCES, "Permission denied")
        monkeypatch.setattr(results_io.os, "open", denied)
    else:
        folder.chmod(0o555)
    try:
        with pytest.raises(ResultWriteError, match="Permission denied.*make the folder "
                           "writable"):
            _result(2.0).save(folder / "r")
    finally:
        folder.chmod(0o755)
    assert _loss(folder / "r") == 1.0


def test_a_missing_parent_is_created_or_named(tmp_path):
    path = _result(1.0).save(tmp_path / "new" / "deeper" / "r")
    assert path.is_file() and _loss(path) == 1.0
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ResultWriteError, match="cannot create the folder.*a_file"):
        _result(1.0).save(tmp_path / "a_file" / "sub" / "r")
    with pytest.raises(ResultWriteError, match="does not exist.*create it"):
        results_io.write_atomic(tmp_path / "nowhere" / "report.html", "x")


def test_saved_files_get_the_mode_of_an_ordinary_write(tmp_path):
    (tmp_path / "plain").write_text("x")
    _result(1.0).save(tmp_path / "r")
    mode = (tmp_path / "plain").stat().st_mode & 0o777
    assert {(tmp_path / n).stat().st_mode & 0o777 for n in ("r.json", "r.npz")} == {mode}


def test_load_results_on_a_missing_directory_is_an_error(tmp_path):
    with pytest.raises(ResultFileError, match="does not exist"):
        acv.load_results(tmp_path / "missing")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ResultFileError, match="not a directory"):
        acv.load_results(tmp_path / "f")


@pytest.mark.parametrize("damage", ["truncated", "flipped byte"])
def test_a_damaged_npz_is_a_named_error(tmp_path, damage):
    _result(1.0).save(tmp_path / "r")
    raw = bytearray((tmp_path / "r.npz").read_bytes())
    if damage == "truncated":
        raw = raw[: len(raw) // 2]
    else:
        raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "r.npz").write_bytes(bytes(raw))
    with pytest.raises(ResultFileError, match="r.npz.*damaged"):
        acv.load_result(tmp_path / "r")


def _as_version_1(stem):
    """Rewrite the saved result ``stem`` as format version 1 wrote it (no digest)."""
    meta = json.loads(stem.with_suffix(".json").read_text())
    meta["version"] = 1
    del meta["npz_sha256"]
    stem.with_suffix(".json").write_text(json.dumps(meta))


@pytest.mark.parametrize("content", ["random bytes", "flipped byte", "missing"])
def test_a_damaged_npz_without_digest_is_a_named_error(tmp_path, content):
    _result(1.0).save(tmp_path / "r")
    _as_version_1(tmp_path / "r")
    assert _loss(tmp_path / "r") == 1.0        # version 1 files still load
    npz = tmp_path / "r.npz"
    if content == "random bytes":
        npz.write_bytes(np.random.default_rng(0).bytes(300))
    elif content == "flipped byte":
        raw = bytearray(npz.read_bytes())
        raw[60] ^= 0xFF                        # inside the first member's compressed data
        npz.write_bytes(bytes(raw))
    else:
        npz.unlink()
    with pytest.raises(ResultFileError) as info:
        acv.load_result(tmp_path / "r")
    message = str(info.value)
    assert "r.npz" in message and "allow_pickle" not in message
    assert {"random bytes": "not an .npz archive", "flipped byte": "damaged",
            "missing": "lost its arrays"}[content] in message


def test_one_bad_file_in_a_folder_is_named_not_skipped_silently(tmp_path):
    for name, shift in (("a", 1.0), ("b", 2.0), ("c", 3.0)):
        _result(shift).save(tmp_path / name)
    (tmp_path / "b.npz").write_bytes(b"PK\x03\x04 cut short")
    (tmp_path / "notes.json").write_text('{"not": "a result"}')    # not a result: ignored
    with pytest.raises(ResultFileError, match="1 file.*b.json.*skip_damaged=True"):
        acv.load_results(tmp_path)
    with pytest.warns(ResultFileWarning, match="b.json"):
        loaded = acv.load_results(tmp_path, skip_damaged=True)
    assert sorted(loaded) == ["a", "c"]
    found, skipped = results_io.scan_results(tmp_path)
    assert [s.path.name for s in skipped] == ["b.json", "notes.json"]


def test_a_fingerprint_survives_the_round_trip(tmp_path):
    from approxcv.engine.fingerprint import result_fingerprint
    res = _result(1.0)
    res.fingerprint = result_fingerprint(np.arange(6.0), res.folds, "within")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = acv.load_result(res.save(tmp_path / "r"))
    assert back.fingerprint == res.fingerprint


def test_names_with_dots_keep_them(tmp_path):
    _result(1.0).save(tmp_path / "lam=0.3")
    _result(2.0).save(tmp_path / "lam=0.5")        # not both written to lam=0.json
    assert _loss(tmp_path / "lam=0.3") == 1.0 and _loss(tmp_path / "lam=0.5.json") == 2.0
    assert sorted(acv.load_results(tmp_path)) == ["lam=0.3", "lam=0.5"]
