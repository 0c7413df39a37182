"""Checkpoints: bound to their inputs, appended to, shared by processes, validated on load."""
import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from approxcv.engine.checkpoint import VERSION, Checkpoint
from approxcv.engine.fingerprint import fingerprint, fold_digest
from approxcv.errors import CheckpointError, InvalidArgumentError

D = 3
FIELDS = {"u": ("f8", (D,)), "converged": ("?", ()), "num_steps": ("i8", ()),
          "grad_norm": ("f8", ())}


class Model:
    def __init__(self, n_states, prior=1.0):
        self.n_states, self.prior, self._cache = n_states, prior, object()


def inputs(**change):
    return {"data": np.arange(20.0).reshape(10, 2), "model": Model(2), "scheme": "A",
            "level": "point", "options": {"solver": "bfgs", "max_steps": 1000},
            "params": np.linspace(0, 1, D), **change}


def folds(n_folds=6):
    idx = [np.array([k, k + 5]) for k in range(n_folds)]
    return list(range(n_folds)), [fold_digest(i) for i in idx]


def rec(fid, converged=True, **over):
    r = {"u": np.full(D, fid + 0.5), "converged": converged, "num_steps": 10 + fid,
         "grad_norm": 1e-9 * (fid + 1)}
    r.update(over)
    return r


def listing(path):
    """Files in a directory but the lock file (which filelock may or may not remove)."""
    return sorted(n for n in os.listdir(path) if n != ".lock")


def open_ck(path, **change):
    return Checkpoint(path, fingerprint(**inputs(**change)), FIELDS)


def test_round_trip_across_batches(tmp_path):
    ids, dig = folds()
    ck = open_ck(tmp_path / "ck")
    assert ck.load(ids, dig) == {}
    ck.append({0: rec(0), 1: rec(1)})
    ck.append({np.int64(2): rec(2, converged=False)})
    got = open_ck(tmp_path / "ck").load(ids, dig)
    assert sorted(got) == [0, 1, 2]
    for fid, r in got.items():
        want = rec(fid, converged=fid != 2)
        np.testing.assert_array_equal(r["u"], want["u"])
        assert r["converged"] == want["converged"] and r["num_steps"] == want["num_steps"]
        assert r["grad_norm"] == want["grad_norm"] and set(r) == set(FIELDS)
    assert isinstance(got[0]["num_steps"], np.integer)


@pytest.mark.parametrize("name, value", [
    ("data", np.arange(20.0).reshape(10, 2) + 1e-12),
    ("model", Model(2, prior=2.0)),
    ("scheme", "B"),
    ("level", "structure"),
    ("options", {"solver": "newton", "max_steps": 1000}),
    ("params", np.linspace(0, 1, D) * 1.0000001),
])
def test_a_mismatch_in_any_input_is_refused_naming_the_input_and_path(tmp_path, name, value):
    path = tmp_path / "ck"
    open_ck(path).append({0: rec(0)}, {0: folds()[1][0]})
    with pytest.raises(CheckpointError, match=f"different {name};") as err:
        open_ck(path, **{name: value})
    assert str(path) in str(err.value)
    open_ck(path)  # the matching inputs still open it


def test_several_differences_are_all_named_and_an_unrecorded_input_is_refused(tmp_path):
    path = tmp_path / "ck"
    open_ck(path)
    with pytest.raises(CheckpointError, match="different data, scheme;"):
        open_ck(path, data=np.zeros(3), scheme="B")
    with pytest.raises(CheckpointError, match=r"no record of inputs \['restarts'\]"):
        Checkpoint(path, fingerprint(**inputs(), restarts=3), FIELDS)
    with pytest.raises(CheckpointError, match="stores record fields"):
        Checkpoint(path, fingerprint(**inputs()), {**FIELDS, "objective": ("f8", ())})


def test_fingerprint_is_stable_and_sees_values_not_identity():
    a = fingerprint(x={"b": [1, 2.5], "a": np.ones(3)}, m=Model(2), f=np.mean, t=("A", None))
    b = fingerprint(x={"a": np.ones(3).copy(), "b": [1, 2.5]}, m=Model(2), f=np.mean,
                    t=("A", None))
    assert a == b and set(a) == {"x", "m", "f", "t"}
    assert fingerprint(x=np.ones(3))["x"] != fingerprint(x=np.ones(3, np.float32))["x"]
    assert fingerprint(x=np.ones((3, 1)))["x"] != fingerprint(x=np.ones((1, 3)))["x"]
    assert fingerprint(x=[1, 2])["x"] != fingerprint(x=(1, 2))["x"]
    assert fingerprint(x=np.int64(3))["x"] == fingerprint(x=3)["x"]
    big = np.zeros(10_000)
    big2 = big.copy()
    big2[5000] = 1.0  # a difference that repr() of the array would hide
    assert fingerprint(x=big)["x"] != fingerprint(x=big2)["x"]
    keyed = SimpleNamespace(static_key=lambda: ("K", 2))
    assert fingerprint(m=keyed)["m"] == fingerprint(m=SimpleNamespace(static_key=lambda: ("K", 2)))["m"]
    fp = [fingerprint(f=f)["f"] for f in (lambda x: x + 1, lambda x: x + 2,
                                           functools.partial(np.sum, axis=0),
                                           functools.partial(np.sum, axis=1))]
    assert len(set(fp)) == 4
    with pytest.raises(InvalidArgumentError, match="'w'.*static_key"):
        fingerprint(w=iter([1]))


def test_fingerprint_is_equal_in_another_process():
    code = ("import numpy as np; from approxcv.engine.fingerprint import fingerprint; "
            "print(fingerprint(d={'y': np.arange(5.0), 's': 'A', 'k': (2, 0.1)})['d'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    want = fingerprint(d={"y": np.arange(5.0), "s": "A", "k": (2, 0.1)})["d"]
    assert out.stdout.strip() == want


def test_a_fold_whose_left_out_units_changed_is_refused(tmp_path):
    ids, dig = folds()
    ck = open_ck(tmp_path / "ck")
    ck.load(ids, dig)
    ck.append({3: rec(3)})
    dig2 = list(dig)
    dig2[3] = fold_digest([3, 6])
    with pytest.raises(CheckpointError, match="fold 3 with different left-out units"):
        open_ck(tmp_path / "ck").load(ids, dig2)
    assert fold_digest([8, 3, 3]) == fold_digest(np.array([3, 8])) == fold_digest(
        np.isin(np.arange(10), [3, 8]))


def test_resuming_with_a_subset_keeps_the_other_folds(tmp_path):
    ids, dig = folds(6)
    ck = open_ck(tmp_path / "ck")
    ck.load(ids, dig)
    ck.append({k: rec(k) for k in ids})
    sub = open_ck(tmp_path / "ck")
    got = sub.load(ids[1:3], dig[1:3])
    assert sorted(got) == [1, 2]
    extra_dig = fold_digest([9])
    sub.append({6: rec(6)}, {6: extra_dig})  # a fold the first run did not have
    everything = open_ck(tmp_path / "ck").load(ids + [6], dig + [extra_dig])
    assert sorted(everything) == list(range(7))


_WRITER = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from approxcv.engine.checkpoint import Checkpoint, fold_digest
    path, me, n_proc, fp, fields = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *map(
        json.loads, sys.argv[4:])
    ready = os.path.join(os.path.dirname(path), "ready{}")
    open(ready.format(me), "w").close()
    while sum(os.path.exists(ready.format(k)) for k in range(n_proc)) < n_proc:
        time.sleep(0.005)  # start together: the header is created concurrently too
    ck = Checkpoint(path, fp, {f: tuple(v) for f, v in fields.items()})
    mine = [k for k in range(60) if k % n_proc == me] + [100, 101]  # 100, 101: everyone
    for s in range(0, len(mine), 2):
        ck.append({k: {"u": np.full(3, k + 0.5), "converged": True, "num_steps": 10 + k,
                       "grad_norm": 1e-9 * (k + 1)} for k in mine[s:s + 2]},
                  {k: fold_digest([k]) for k in mine[s:s + 2]})
""")


def test_processes_appending_to_one_path_concurrently_lose_nothing(tmp_path):
    path, n_proc = tmp_path / "ck", 2
    args = [json.dumps(fingerprint(**inputs())), json.dumps(FIELDS)]
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(k), str(n_proc),
                               *args], stderr=subprocess.PIPE, text=True) for k in range(n_proc)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    ids = list(range(60)) + [100, 101]
    got = open_ck(path).load(ids, [fold_digest([k]) for k in ids])
    assert sorted(got) == ids
    for k in ids:
        np.testing.assert_array_equal(got[k]["u"], rec(k)["u"])
        assert got[k]["num_steps"] == rec(k)["num_steps"] and got[k]["converged"]
    names = os.listdir(path)
    assert not [n for n in names if n.startswith(".tmp")]
    assert len([n for n in names if n.startswith("batch-")]) == 30 + n_proc


def _one_batch(tmp_path):
    ids, dig = folds()
    ck = open_ck(tmp_path / "ck")
    ck.load(ids, dig)
    return ck, ck.append({0: rec(0), 1: rec(1)}), ids, dig


def test_a_truncated_batch_file_raises_checkpoint_error_naming_path_and_file(tmp_path):
    ck, file, ids, dig = _one_batch(tmp_path)
    data = Path(file).read_bytes()
    Path(file).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="damaged") as err:
        ck.load(ids, dig)
    assert str(ck.path) in str(err.value) and os.path.basename(file) in str(err.value)


def test_a_corrupted_byte_in_a_batch_file_raises_checkpoint_error(tmp_path):
    ck, file, ids, dig = _one_batch(tmp_path)
    data = bytearray(Path(file).read_bytes())
    at = data.find(rec(1)["u"].tobytes())  # fold 1's parameters inside field_u.npy
    assert at > 0
    data[at + 5] ^= 0xFF
    Path(file).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="damaged.*CRC"):
        ck.load(ids, dig)


@pytest.mark.parametrize("arrays, what", [
    ({"fold_ids": np.array([0]), "fold_digests": np.array([fold_digest([0, 5])])},
     "field 'u' is missing"),
    ({"fold_ids": np.array([0]), "fold_digests": np.array([fold_digest([0, 5])]),
      "field_u": np.zeros((1, D + 1)), "field_converged": np.array([True]),
      "field_num_steps": np.array([1]), "field_grad_norm": np.array([0.0])}, "field 'u' has shape"),
    ({"fold_ids": np.array([0]), "fold_digests": np.array([[fold_digest([0, 5])]])},
     "fold_digests has shape"),
    ({"fold_digests": np.array([fold_digest([0, 5])])}, "KeyError"),
    ({"fold_ids": np.array([0], dtype=object), "fold_digests": np.array(["x"])}, "pickle"),
    ({"fold_ids": np.array([0]), "fold_digests": np.array(["x"]), "run_digest": None},
     "run_digest is missing"),
    ({"fold_ids": np.array([0]), "fold_digests": np.array(["x"]), "run_digest": np.zeros(2)},
     "run_digest has shape"),
])
def test_a_malformed_batch_file_raises_checkpoint_error(tmp_path, arrays, what):
    ids, dig = folds()
    ck = open_ck(tmp_path / "ck")
    arrays = {"run_digest": np.array(ck.run_digest), **arrays}
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez(tmp_path / "ck" / "batch-0-bad.npz", **arrays)
    with pytest.raises(CheckpointError, match=what):
        ck.load(ids, dig)


@pytest.mark.parametrize("header, what", [
    ("{not json", "header.json is unreadable"),
    ('{"format": "other"}', "not an approxcv checkpoint header"),
    ('{"format": "approxcv-checkpoint", "version": 99}', "format version 99"),
    ('{"format": "approxcv-checkpoint", "version": 1}', "format version 1; .* reads version 2"),
    ('{"format": "approxcv-checkpoint", "version": %d, "fields": {}}' % VERSION,
     "valid fingerprint"),
])
def test_a_corrupted_header_raises_checkpoint_error_naming_the_path(tmp_path, header, what):
    path = tmp_path / "ck"
    open_ck(path)
    (path / "header.json").write_text(header)
    with pytest.raises(CheckpointError, match=what) as err:
        open_ck(path)
    assert str(path) in str(err.value)


def test_a_file_or_a_foreign_directory_is_not_taken_for_a_checkpoint(tmp_path):
    old = tmp_path / "old.npz"
    np.savez(old, u=np.zeros(2))
    with pytest.raises(CheckpointError, match="is a file"):
        open_ck(old)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        open_ck(tmp_path / "mine")
    assert listing(tmp_path / "mine") == ["notes.txt"]


def test_non_finite_parameters_are_never_converged(tmp_path):
    ids, dig = folds()
    ck = open_ck(tmp_path / "ck")
    ck.load(ids, dig)
    ck.append({0: rec(0, u=np.array([np.nan, 0.0, 1.0])), 1: rec(1)})
    # a file written by another writer with NaN marked converged
    np.savez(tmp_path / "ck" / "batch-0-foreign.npz", run_digest=np.array(ck.run_digest),
             fold_ids=np.array([2]),
             fold_digests=np.array([dig[2]]), field_u=np.array([[np.inf, 0.0, 0.0]]),
             field_converged=np.array([True]), field_num_steps=np.array([3]),
             field_grad_norm=np.array([0.0]))
    got = ck.load(ids, dig)
    assert not got[0]["converged"] and not got[2]["converged"] and got[1]["converged"]
    assert np.isnan(got[0]["u"][0])


def test_of_duplicate_records_the_converged_then_the_better_one_is_returned(tmp_path):
    ids, dig = folds()
    fields = {**FIELDS, "objective": ("f8", ())}
    ck = Checkpoint(tmp_path / "ck", fingerprint(**inputs()), fields)
    ck.load(ids, dig)
    ck.append({0: {**rec(0, converged=False), "objective": 1.0},
               1: {**rec(1), "objective": 5.0}})
    ck.append({0: {**rec(0, u=np.full(D, 7.0)), "objective": 2.0},
               1: {**rec(1, u=np.full(D, 8.0)), "objective": 4.0}})
    ck.append({1: {**rec(1, u=np.full(D, 9.0)), "objective": 4.0}})  # a tie: earliest wins
    got = ck.load(ids, dig)
    assert got[0]["converged"] and got[0]["u"][0] == 7.0
    assert got[1]["objective"] == 4.0 and got[1]["u"][0] == 8.0


def test_bad_records_are_refused_on_append(tmp_path):
    ids, dig = folds()
    ck = open_ck(tmp_path / "ck")
    with pytest.raises(InvalidArgumentError, match="no fold digest"):
        ck.append({0: rec(0)})
    ck.load(ids, dig)
    with pytest.raises(InvalidArgumentError, match="has fields"):
        ck.append({0: {"u": np.zeros(D)}})
    with pytest.raises(InvalidArgumentError, match="shape"):
        ck.append({0: rec(0, u=np.zeros(D + 1))})
    with pytest.raises(InvalidArgumentError, match="cannot be stored"):
        ck.append({0: rec(0, num_steps=1.5)})
    assert ck.append({}) is None
    assert listing(tmp_path / "ck") == ["header.json"]


def test_no_temporary_file_is_left_behind_when_a_write_fails(tmp_path, monkeypatch):
    ck = _one_batch(tmp_path)[0]

    def fail(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(np, "savez", fail)
    with pytest.raises(CheckpointError, match="cannot write batch-"):
        ck.append({2: rec(2)})
    names = listing(tmp_path / "ck")
    assert len(names) == 2 and names[0].startswith("batch-") and names[1] == "header.json"
    assert json.loads((tmp_path / "ck" / "header.json").read_text())["version"] == VERSION


def test_a_batch_file_copied_from_another_runs_checkpoint_is_refused(tmp_path):
    ids, dig = folds()
    a, b = open_ck(tmp_path / "a"), open_ck(tmp_path / "b", scheme="B")
    a.load(ids, dig)
    b.load(ids, dig)
    a.append({0: rec(0)})
    copied = Path(b.append({1: rec(1)}))  # same folds, another scheme: merged by hand
    (tmp_path / "a" / copied.name).write_bytes(copied.read_bytes())
    with pytest.raises(CheckpointError, match=f"batch file {copied.name} was written by "
                       "another run"):
        open_ck(tmp_path / "a").load(ids, dig)
    with pytest.raises(CheckpointError, match="another run"):  # even for folds not asked for
        open_ck(tmp_path / "a").load(ids[2:], dig[2:])


def test_the_approxcv_version_is_part_of_the_fingerprint(tmp_path, monkeypatch):
    from approxcv.engine import checkpoint
    mine = checkpoint.__version__
    assert open_ck(tmp_path / "ck").fingerprint["approxcv_version"] == mine
    monkeypatch.setattr(checkpoint, "__version__", "0.0.1")
    with pytest.raises(CheckpointError, match=rf"different approxcv_version \({mine}; this is "
                       r"0\.0\.1\)"):
        open_ck(tmp_path / "ck")


def _corruptions(data: bytes, n: int, seed: int):
    """The zip fields that made zipfile raise raw errors (compression method 99:
    NotImplementedError; the "encrypted" flag: RuntimeError), then ``n`` seeded random
    bit flips, byte overwrites and truncations."""
    central = data.find(b"PK\x01\x02")
    assert central > 0
    method, flags = bytearray(data), bytearray(data)
    method[central + 10] = 99
    flags[central + 8] |= 1
    yield bytes(method)
    yield bytes(flags)
    rng = np.random.default_rng(seed)
    for _ in range(n):
        d, at = bytearray(data), int(rng.integers(len(data)))
        kind = rng.integers(3)
        if kind == 0:
            d[at] ^= 1 << int(rng.integers(8))
        elif kind == 1:
            d[at] = int(rng.integers(256))
        else:
            d = d[:at]
        yield bytes(d)


def test_any_corruption_of_a_batch_file_is_a_checkpoint_error_or_harmless(tmp_path):
    ck, file, ids, dig = _one_batch(tmp_path)
    want = ck.load(ids, dig)
    data = Path(file).read_bytes()
    refused = 0
    for bad in _corruptions(data, 80, seed=0):
        Path(file).write_bytes(bad)
        try:
            got = ck.load(ids, dig)
        except CheckpointError as err:
            assert os.path.basename(file) in str(err)
            refused += 1
            continue
        assert sorted(got) == sorted(want)  # a byte the reader never uses: same records
        for fid, r in got.items():
            assert all(np.array_equal(r[f], want[fid][f]) for f in FIELDS)
    assert refused > 60
