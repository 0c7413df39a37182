"""The persistent program cache (``approxcv/_runtime/program_cache.py``): keys name programs exactly
or not at all, a second process loads instead of tracing, and what cannot be keyed or
stored goes through ``jax.jit`` as before."""
import functools
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from approxcv._runtime import program_cache as _program_cache
from approxcv._runtime import workarounds
from approxcv.engine.methods import ij as ij_module
from approxcv.problem import flat_params
from tests.conftest import cache_child_env

pc = _program_cache


def _scaled(scale):
    def scaled(x):
        return x * scale
    return scaled


def test_fingerprint_names_functions_by_module_name_and_closure():
    assert pc.fingerprint(flat_params) == pc.fingerprint(flat_params)
    # approxcv closures: the values they hold are part of the key
    from approxcv.optim.newton import value_and_derivatives
    assert "value_and_derivatives" in pc.fingerprint(value_and_derivatives)
    assert pc.fingerprint(functools.partial(flat_params, 1.0)) != \
        pc.fingerprint(functools.partial(flat_params, 2.0))
    assert pc.fingerprint(np.float64(1.0)) != pc.fingerprint(np.float32(1.0))
    assert pc.fingerprint({"b": 1, "a": (2, 3.5)}) == pc.fingerprint({"a": (2, 3.5), "b": 1})
    assert pc.fingerprint(np.arange(3.0)) != pc.fingerprint(np.arange(3.0) + [0, 0, 1e-12])


def test_what_cannot_be_named_exactly_is_unkeyable():
    with pytest.raises(pc.Unkeyable, match="module"):
        pc.fingerprint(_scaled(2.0))             # a test's function: its body is not in the key
    with pytest.raises(pc.Unkeyable, match="module"):
        pc.fingerprint(lambda x: x)
    with pytest.raises(pc.Unkeyable, match="elements"):
        pc.fingerprint(np.zeros(pc.MAX_ARRAY_ELEMENTS + 1))
    with pytest.raises(pc.Unkeyable):
        pc.fingerprint(object())


def test_a_function_that_calls_itself_has_a_key():
    """The problem's ``unravel`` refers to itself (its closure holds it): a back-reference,
    not an endless recursion."""
    import approxcv as acv
    model = acv.models.PoissonHMM(n_states=2)
    x = acv.datasets.load_calls(60)
    params = model.init_params(model.prepare(x, None)[0], None, 1, 0)[0]
    from approxcv.problem import make_problem
    problem = make_problem(model, x, params)
    key = pc.fingerprint(problem.unravel)
    assert "back:" in key and key == pc.fingerprint(problem.unravel)


def test_settings_and_monkeypatches_reach_the_key(monkeypatch):
    before = pc.namespace_digest()
    monkeypatch.setattr(ij_module, "NEWTON_DIAGNOSTIC_RTOL", 2e-3)
    assert pc.namespace_digest() != before           # a changed setting: another key
    monkeypatch.undo()
    assert pc.namespace_digest() == before
    monkeypatch.setattr(ij_module, "ij_params", _scaled(1.0))
    with pytest.raises(pc.Unkeyable, match="ij_params"):
        pc.namespace_digest()                          # a test's function bound: no key


def test_the_source_digest_reads_the_whole_package():
    """The key's source digest covers every module of approxcv, not only the runtime's."""
    import approxcv
    assert pc.PACKAGE_ROOT == Path(approxcv.__file__).resolve().parent


def test_names_looked_up_on_first_use_leave_the_runtime_settings_alone():
    """Looking up a name of ``approxcv._runtime`` binds nothing there: the settings in the
    key do not depend on which names were used."""
    import approxcv._runtime as runtime
    before = pc.namespace_digest()
    for name in runtime.__all__:
        getattr(runtime, name)
    assert pc.namespace_digest() == before
    assert not set(runtime._ON_FIRST_USE) & set(vars(runtime))


def test_programs_with_host_callbacks_are_not_stored():
    def noisy(x):
        jax.debug.callback(lambda v: None, x)
        return x + 1.0
    compiled = jax.jit(noisy).lower(jnp.ones(3)).compile()
    assert pc.unstorable(compiled) == "host callbacks or effects"
    assert pc.unstorable(jax.jit(jnp.sin).lower(jnp.ones(3)).compile()) is None


SMALL_JOB = """
import jax, jax.monitoring
import numpy as np
compiles = []          # programs XLA compiled (or JAX's cache loaded) in this process
jax.monitoring.register_event_duration_secs_listener(
    lambda e, d, **k: compiles.append(e) if e.endswith("backend_compile_duration") else None)
import approxcv as acv
from approxcv._runtime import program_cache as _program_cache
from approxcv._runtime import workarounds
_program_cache.MIN_SECONDS = 0
x = acv.datasets.load_calls(300)
model = acv.models.PoissonHMM(n_states=2)
params = model.fit(x)
folds = acv.folds.iid(len(x), frac=0.1, n_folds=12, seed=0)
ij = acv.cross_validate(model, x, folds, method="ij", params=params, progress=False)
s = _program_cache.stats
print(s["loaded"], s["stored"], s["compiled"], s["bypassed"], len(compiles),
      s["rejected"], dict(s["reasons"]))
np.save("{out}", np.asarray(ij.fold_loss))
"""


def _job(cache, out, extra_env=None):
    env = cache_child_env(cache, extra_env)
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", SMALL_JOB.format(out=out)],
                          env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[-3000:]
    loaded, stored, compiled, bypassed, xla, rejected = (int(v)
                                                         for v in proc.stdout.split()[:6])
    return loaded, stored, compiled, bypassed, np.load(out), xla, rejected


def test_a_second_process_loads_every_program_and_gets_the_same_numbers(tmp_path):
    cold = _job(tmp_path / "cache", tmp_path / "cold.npy")
    warm = _job(tmp_path / "cache", tmp_path / "warm.npy")
    loaded, stored, compiled, bypassed = cold[:4]
    assert loaded == 0 and stored > 0 and bypassed == 0
    loaded, stored, compiled, bypassed = warm[:4]
    assert loaded > 0 and compiled == 0 and stored == 0 and bypassed == 0
    # nothing else compiled either: no eager JAX operation on the path, and the check of
    # approxcv's XLA options read from the first process's record
    assert warm[5] == 0 < cold[5]
    np.testing.assert_array_equal(warm[4], cold[4])          # the same programs, bit for bit
    entries = list((tmp_path / "cache").glob("*/programs/*"))
    assert entries
    # a damaged entry is compiled again and replaced, with the same numbers
    for entry in entries:
        entry.write_bytes(b"not a program")
    damaged = _job(tmp_path / "cache", tmp_path / "damaged.npy")
    assert damaged[0] == 0 and damaged[2] > 0 and damaged[1] == cold[1]     # replaced
    np.testing.assert_array_equal(damaged[4], cold[4])
    mended = _job(tmp_path / "cache", tmp_path / "mended.npy")
    assert mended[0] == warm[0] and mended[2] == 0
    np.testing.assert_array_equal(mended[4], cold[4])
    # switched off: nothing loaded or stored, the same numbers
    off = _job(tmp_path / "cache", tmp_path / "off.npy", {pc.DISABLE_ENV: "1"})
    assert off[:2] == (0, 0)
    np.testing.assert_array_equal(off[4], cold[4])


def _programs(folder):
    """The stored programs in ``folder`` (not the records of checked XLA options)."""
    return sorted(p for p in folder.iterdir() if not p.name.startswith("options-"))


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory):
    """``(cache, cold)``: a cache directory filled by :data:`SMALL_JOB` in a child process
    that found it empty (its numbers are an uncached run's), and that run's results."""
    root = tmp_path_factory.mktemp("filled")
    return root / "cache", _job(root / "cache", root / "cold.npy")


def _copy_of(filled_cache, tmp_path):
    """A copy of the filled cache to damage, and its stored programs."""
    cache = shutil.copytree(filled_cache[0], tmp_path / "cache")
    (programs,) = cache.glob("*/programs")
    return cache, _programs(programs)


def test_a_damaged_entry_never_reaches_xla(filled_cache, tmp_path):
    """64 bytes flipped in the middle of every stored program (once: protobuf's "invalid
    UTF-8" lines on stderr, or SIGILL when the program ran): each entry is rejected by its
    digest, compiled again and stored anew, silently, with the uncached run's numbers."""
    cache, entries = _copy_of(filled_cache, tmp_path)
    for entry in entries:
        blob = bytearray(entry.read_bytes())
        mid = len(blob) // 2
        blob[mid:mid + 64] = bytes(b ^ 0xFF for b in blob[mid:mid + 64])
        entry.write_bytes(bytes(blob))
    cold = filled_cache[1]
    damaged = _job(cache, tmp_path / "damaged.npy")        # exit 0, stderr empty (_job)
    assert damaged[0] == 0 and damaged[6] == len(entries) and damaged[1] == cold[1]
    np.testing.assert_array_equal(damaged[4], cold[4])


def test_an_entry_under_another_key_is_rejected(filled_cache, tmp_path):
    """Two entries' contents swapped (once: JAX's raw ``TypeError`` for arguments the
    loaded program was not compiled for): the key in each entry's header rejects both; the
    other programs load, and the numbers are the uncached run's."""
    cache, entries = _copy_of(filled_cache, tmp_path)
    first, second = entries[:2]
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)
    second.write_bytes(a)
    cold = filled_cache[1]
    swapped = _job(cache, tmp_path / "swapped.npy")
    assert swapped[6] == 2 and swapped[0] == len(entries) - 2 and swapped[1] == 2
    np.testing.assert_array_equal(swapped[4], cold[4])


def test_an_entry_holds_its_key_and_digest():
    payload = b"program\nbytes"
    blob = pc.entry_bytes("k1", payload)
    assert pc.verified_payload("k1", blob) == payload
    with pytest.raises(pc.RejectedEntry, match="another key"):
        pc.verified_payload("k2", blob)
    with pytest.raises(pc.RejectedEntry, match="digest"):
        pc.verified_payload("k1", blob[:-1] + b"X")
    with pytest.raises(pc.RejectedEntry, match="format"):
        pc.verified_payload("k1", payload)


def test_a_stored_program_that_fails_to_run_is_compiled_again(tmp_path, monkeypatch):
    """A loaded program's first run is checked: one that fails (jaxlib's ``Function ...
    not found``, an executable stored without a kernel) is removed, compiled again, stored
    anew, and the call returns the right numbers."""
    from approxcv.engine import fold_newton
    chol = np.linalg.cholesky(np.array([[4.0, 1.0], [1.0, 3.0]]))
    r = np.array([1.0, -2.0])
    expected = np.linalg.solve(chol @ chol.T, r)
    monkeypatch.setattr(pc, "MIN_SECONDS", 0.0)
    pc.use_directory(tmp_path)
    try:
        pc.clear()
        np.testing.assert_allclose(fold_newton._chord_direction(chol, r), expected, rtol=1e-12)
        (entry,) = _programs(tmp_path)
        written = entry.stat().st_mtime_ns
        pc.clear()
        original = jax.stages.Compiled.__call__
        failures = []

        def fails_once(self, *args, **kwargs):
            if not failures:
                failures.append(self)
                raise jax.errors.JaxRuntimeError(
                    "NOT_FOUND: Function select_select_fusion not found (type id: 1)")
            return original(self, *args, **kwargs)
        monkeypatch.setattr(jax.stages.Compiled, "__call__", fails_once)
        before = dict(pc.stats["reasons"])
        np.testing.assert_allclose(fold_newton._chord_direction(chol, r), expected, rtol=1e-12)
        assert failures
        failed = [k for k, v in pc.stats["reasons"].items()
                  if k.startswith("stored program failed to run") and v > before.get(k, 0)]
        assert failed and "select_select_fusion" in failed[0]
        (again,) = _programs(tmp_path)
        assert again.stat().st_mtime_ns != written or again.name != entry.name  # stored anew
        monkeypatch.setattr(jax.stages.Compiled, "__call__", original)
        pc.clear()
        loaded = pc.stats["loaded"]
        np.testing.assert_allclose(fold_newton._chord_direction(chol, r), expected, rtol=1e-12)
        assert pc.stats["loaded"] == loaded + 1
    finally:
        pc.use_directory(None)
        pc.clear()


def test_a_numpy_scalar_has_the_key_of_the_array_jax_makes_of_it():
    """``np.float64`` is a Python ``float`` too, but JAX traces it as a strongly typed 0-d
    array: a loop that feeds a program's outputs back in (lambda tuning's Newton steps)
    calls one program, under one key, not two."""
    assert pc.avals([np.float64(1.5)]) == pc.avals([jnp.zeros((), jnp.float64)])
    assert pc.avals([1.5]) != pc.avals([np.float64(1.5)])      # a Python float is weak
    assert pc.avals([np.int64(2)]) == pc.avals([jnp.zeros((), jnp.int64)])


def test_a_later_process_skips_the_check_of_the_xla_options(tmp_path, monkeypatch):
    """The check that XLA knows approxcv's compile options (a small compile) runs once per
    environment; later processes read its record."""
    from approxcv._runtime import compile as _compile
    options = {"xla_cpu_use_fusion_emitters": False, **pc.MARK}
    pc.use_directory(tmp_path)
    try:
        assert not pc.options_known(options)
        pc.record_options(options)
        assert pc.options_known(options)
        assert not pc.options_known({**options, "xla_backend_optimization_level": 0})
        probes, real_jit = [], jax.jit
        monkeypatch.setattr(_compile.jax, "jit",
                            lambda *a, **k: probes.append(k) or real_jit(*a, **k))
        _compile.compiler_options.cache_clear()
        assert _compile.compiler_options("cpu", False, True) == options
        assert probes == []                              # no probe compiled
    finally:
        _compile.compiler_options.cache_clear()
        pc.use_directory(None)


def test_the_store_is_on_only_within_the_releases_it_was_checked_on(monkeypatch):
    """Outside :data:`STORE_CHECKED_JAX` the store is off, said once (a RuntimeWarning and
    ``stats["off"]``); the installed jax and jaxlib are inside (the suite runs on them)."""
    on, why = workarounds.store_checked(jax.__version__, metadata.version("jaxlib"))
    assert on and why == ""
    off, why = workarounds.store_checked("0.8.1", "0.9.2")
    assert not off and why.startswith("approxcv's program store is off: jax 0.8.1 lie")
    assert not workarounds.store_checked("0.9.2", "0.10.1")[0]
    if _program_cache.directory() is None:
        pytest.skip("approxcv's compilation cache is off in this environment")
    monkeypatch.setattr(workarounds, "STORE_CHECKED_JAX", ((9, 0, 0), (10, 0, 0)))
    monkeypatch.setitem(_program_cache._STATE, "usable", None)
    monkeypatch.setitem(_program_cache.stats, "off", None)
    with pytest.warns(RuntimeWarning, match="program store is off"):
        assert _program_cache.active() is False
    assert "checked on" in _program_cache.stats["off"]
