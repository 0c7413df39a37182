"""Time to first result: nothing is traced twice, the compilation cache is configurable.

A second fit or IJ on same-shaped data must reuse every compiled program: the objective is
not traced again (counted as optax's tests count traces) and JAX lowers no new program.
"""
import collections
import contextlib
import subprocess
import sys

import jax
import jax.monitoring
import numpy as np
import pytest

import approxcv as acv
from approxcv._runtime import compilation_cache as _compilation_cache
from approxcv._runtime import program_cache as _program_cache
from tests.conftest import simulate_gaussian_hmm

_LOWERINGS = collections.Counter()


def _on_duration(name, seconds, **kwargs):
    if name == "/jax/core/compile/jaxpr_to_mlir_module_duration":
        _LOWERINGS[kwargs.get("fun_name", "?")] += 1


jax.monitoring.register_event_duration_secs_listener(_on_duration)


@contextlib.contextmanager
def lowered():
    """Collect the names of the programs JAX lowers (traces and compiles) in the block."""
    before = collections.Counter(_LOWERINGS)
    out = collections.Counter()
    yield out
    out.update(_LOWERINGS - before)


@pytest.fixture(autouse=True)
def _without_program_cache():
    """These tests count what JAX traces and lowers in this process: approxcv's program
    cache, which would load programs without lowering them, is paused."""
    with _program_cache.paused():
        yield


class CountingHMM(acv.models.GaussianHMM):
    """A Gaussian HMM that counts how often its objective is traced (or run eagerly)."""
    traces = 0

    def objective(self, params, data, weights, scheme="A", level=None):
        type(self).traces += 1
        return super().objective(params, data, weights, scheme, level)


def test_second_fit_and_ij_on_same_shaped_data_do_not_retrace():
    model = CountingHMM(2, n_init=2)
    x, y = simulate_gaussian_hmm(80, seed=1), simulate_gaussian_hmm(80, seed=2)
    folds = acv.folds.iid(80, 0.1, 20, seed=0)
    acv.cross_validate(model, x, folds, "ij", params=model.fit(x), progress=False)
    first = CountingHMM.traces
    assert first > 0
    params = model.fit(y)
    with lowered() as ij_programs:
        acv.cross_validate(model, y, folds, "ij", params=params, progress=False)
    assert CountingHMM.traces == first
    assert not ij_programs, dict(ij_programs)


def test_second_fit_lowers_no_new_program():
    model = acv.models.GaussianHMM(2, n_init=2)
    model.fit(simulate_gaussian_hmm(90, seed=1))
    with lowered() as programs:
        model.fit(simulate_gaussian_hmm(90, seed=2))
    assert not programs, dict(programs)


def test_fit_polish_and_ij_share_the_derivative_program():
    """The fit's Newton polish evaluates (F, g, H, J) with the program the IJ needs at the
    fit, so fit + IJ lower one forward-over-reverse sweep."""
    from approxcv.optim.newton import value_and_derivatives
    model = acv.models.GaussianHMM(2, n_init=1)
    x = simulate_gaussian_hmm(70, seed=3)
    with lowered() as programs:
        params = model.fit(x)
    assert programs["jit(_value_and_derivatives)"] == 1, dict(programs)
    problem = acv.make_problem(model, x, params)
    value, grad, _, jac = value_and_derivatives(problem.fun, problem.u_full,
                                                np.ones(problem.n_units), problem.data)
    assert float(np.linalg.norm(grad)) < 1e-6 * 70
    assert jac.shape == (problem.u_full.size, problem.n_units) and problem.n_units >= 70
    np.testing.assert_allclose(float(value), model.fit_result_["final_objective"], rtol=1e-12)


def test_compilation_cache_directory_and_switch(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(_compilation_cache.DIR_ENV, raising=False)
    assert _compilation_cache.cache_dir() == (tmp_path / "approxcv" / "jax"
                                              / _compilation_cache.cpu_tag())
    for off in ("1", "true", "yes"):
        monkeypatch.setenv(_compilation_cache.DISABLE_ENV, off)
        assert _compilation_cache.disabled()
    for on in ("", "0", "false", "no"):
        monkeypatch.setenv(_compilation_cache.DISABLE_ENV, on)
        assert not _compilation_cache.disabled()


def test_an_entry_left_without_its_access_time_is_repaired(tmp_path):
    # a process killed between JAX's two writes; JAX's eviction then fails on every write
    (tmp_path / "jit_f-1-cache").write_bytes(b"x")
    (tmp_path / "jit_g-2-cache").write_bytes(b"y")
    (tmp_path / "jit_g-2-atime").write_bytes((5).to_bytes(8, "little"))
    assert _compilation_cache.repair(tmp_path) == 1
    assert (tmp_path / "jit_f-1-atime").read_bytes() == bytes(8)
    assert (tmp_path / "jit_g-2-atime").read_bytes() == (5).to_bytes(8, "little")
    assert _compilation_cache.repair(tmp_path) == 0


@pytest.mark.parametrize("off", [False, True])
def test_import_configures_the_cache_unless_turned_off(tmp_path, off):
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "", "HOME": str(tmp_path)}
    if off:
        env[_compilation_cache.DISABLE_ENV] = "1"
    code = ("import jax, approxcv; print(approxcv.compilation_cache_dir, "
            "jax.config.jax_compilation_cache_dir, jax.config.jax_enable_x64)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    # off only where asked: on a CPU whose cache loader logs false errors (AVX-512 with a
    # jaxlib before the fix) too, approxcv dropping those lines around its own loads
    expected = "None" if off else str(tmp_path / "approxcv" / "jax" / _compilation_cache.cpu_tag())
    assert out == [expected, expected, "True"]


def test_a_cache_directory_configured_for_jax_is_kept(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "PATH": "", "HOME": str(tmp_path),
           "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "mine")}
    code = ("import jax, approxcv; print(jax.config.jax_compilation_cache_dir, "
            "jax.config.jax_persistent_cache_min_compile_time_secs)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [str(tmp_path / "mine"), "1.0"]      # JAX's own default threshold


def _python(*args, env=None) -> subprocess.CompletedProcess:
    """``python ARGS`` in a fresh process importing this checkout's approxcv."""
    import os
    from pathlib import Path
    full = dict(os.environ if env is None else env)
    full["PYTHONPATH"] = str(Path(acv.__file__).resolve().parent.parent)
    return subprocess.run([sys.executable, *args], env=full, capture_output=True, text=True)


def _imported(importtime_stderr: str) -> set[str]:
    """Top-level packages named by ``python -X importtime`` on stderr."""
    return {line.rsplit("|", 1)[-1].strip().split(".")[0]
            for line in importtime_stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["demo", "--help"],
                                  ["report", "--help"]])
def test_help_and_version_import_no_numerics(argv):
    res = _python("-X", "importtime", "-m", "approxcv.cli", *argv)
    assert res.returncode == 0, res.stderr[-2000:]
    heavy = _imported(res.stderr) & {"jax", "jaxlib", "numpy", "pandas", "scipy", "matplotlib"}
    assert heavy == set()
    assert "approxcv" in _imported(res.stderr)         # the check can see imports at all
    if argv == ["--version"]:
        assert res.stdout.strip() == f"approxcv {acv.__version__}"
    else:
        assert "usage: approxcv" in res.stdout
        for markup in ("``", ":class:", ":func:", ":meth:", ":mod:", ":attr:"):
            assert markup not in res.stdout, markup       # plain text, no reStructuredText


def test_import_approxcv_imports_no_jax_yet_every_array_is_64_bit():
    code = ("import sys, approxcv\n"
            "assert 'jax' not in sys.modules, 'import approxcv imported jax'\n"
            "import jax.numpy as jnp\n"               # the user's import, before any approxcv use
            "print(jnp.ones(1).dtype, jnp.asarray(0.1).dtype)\n")
    res = _python("-c", code)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["float64", "float64"]


@pytest.mark.parametrize("first", ["from approxcv.models import Ridge",
                                   "from approxcv.inference import chain",
                                   "import approxcv as acv; acv.folds.iid"])
def test_any_way_into_the_numerics_configures_jax_first(first):
    code = f"{first}\nimport jax\nprint(jax.config.jax_enable_x64)\n"
    res = _python("-c", code)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["True"]


def test_one_family_imports_no_other_family():
    """The README example's imports (an HMM, ``cross_validate``, folds, data) load no other
    model family and not SciPy's statistics (about 1.5 s of imports before), yet every
    family's names and the flat layout's old module names still resolve."""
    code = ("import sys, approxcv as acv\n"
            "acv.models.PoissonHMM; acv.cross_validate; acv.folds.iid; acv.datasets.load_calls\n"
            "print(' '.join(sorted({m.split('.')[2] for m in sys.modules\n"
            "                       if m.startswith('approxcv.models.')})))\n"
            "print('scipy.stats' in sys.modules)\n"
            "from approxcv.models.ridge import Ridge\n"
            "print(Ridge is acv.models.Ridge, acv.models.GP.__module__)\n")
    res = _python("-c", code)
    assert res.returncode == 0, res.stderr[-2000:]
    families, stats, resolved = res.stdout.strip().splitlines()
    assert set(families.split()) & {"hmm", "erm", "crf", "mrf", "gp"} == {"hmm"}
    assert stats == "False"
    assert resolved == "True approxcv.models.gp.model"


def test_every_public_name_resolves():
    for name in acv.__all__:
        assert getattr(acv, name) is not None, name
    assert set(acv.__all__) <= set(dir(acv))
    with pytest.raises(AttributeError, match="no attribute 'tuning'"):
        acv.tuning            # noqa: B018 - moved to acv.selection.tuning (docs/guide.md)


#: the JAX settings approxcv may change (docs/design.md, "Conventions"): 64-bit floats and
#: its compilation cache's own settings; every other value must be the user's
APPROXCV_JAX_SETTINGS = {"jax_enable_x64", "jax_compilation_cache_dir",
                         "jax_persistent_cache_min_compile_time_secs",
                         "jax_persistent_cache_min_entry_size_bytes",
                         "jax_compilation_cache_max_size"}

#: a user's process: JAX imported and its settings read before approxcv, then a tiny
#: cross-validation through approxcv; prints what changed (JSON)
NOTHING_GLOBAL = """
import json, os, sys
import jax, jax.monitoring

def settings():
    values = getattr(jax.config, "values", None)
    if values is None:      # a JAX without the public dict: the settings that matter here
        names = ["jax_enable_x64", "jax_compilation_cache_dir", "jax_logging_level",
                 "jax_platforms", "jax_default_matmul_precision", "jax_disable_jit",
                 "jax_persistent_cache_min_compile_time_secs"]
        values = {n: jax.config.read(n) for n in names}
    return {k: repr(v) for k, v in values.items()}

def listeners():
    try:
        from jax._src import monitoring
        return [len(monitoring.get_event_listeners()),
                len(monitoring.get_event_duration_listeners())]
    except (ImportError, AttributeError):
        return None

env_names = ("XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL")
env_before = {n: os.environ.get(n) for n in env_names}
config_before, listeners_before = settings(), listeners()
import numpy as np
import approxcv as acv
from approxcv._runtime import program_cache as _program_cache
x = np.random.default_rng(0).poisson(np.repeat([2.0, 9.0], 30)).astype(float)
res = acv.cross_validate(acv.models.PoissonHMM(2), x, acv.folds.iid(len(x), 0.1, 3, seed=0),
                         method="ij", progress=False, tol=1.0)   # no warning: stderr empty
config_after = settings()
print(json.dumps({
    "env": [env_before, {n: os.environ.get(n) for n in env_names}],
    "changed": sorted(k for k in set(config_before) | set(config_after)
                      if config_before.get(k) != config_after.get(k)),
    "listeners": [listeners_before, listeners()],
    "stored": _program_cache.stats["stored"], "loaded": _program_cache.stats["loaded"],
    "loss": float(np.sum(res.fold_loss))}))
"""


def test_nothing_global_changes_but_x64_and_the_cache_cold_or_warm(tmp_path):
    """approxcv in a user's process, cold cache then warm (issue 58): ``XLA_FLAGS`` and
    ``TF_CPP_MIN_LOG_LEVEL`` as the user set them, every JAX setting but 64-bit floats and
    the cache's own as before the import, no monitoring listener left behind, stderr empty
    at JAX's default log level (where jaxlib 0.9-0.10 logs a WARNING for each program
    loaded), and the program store stores, then loads, with the same numbers."""
    import json
    import os
    from tests.conftest import cache_child_env
    flags = " ".join(filter(None, [os.environ.get("XLA_FLAGS"),
                                   "--xla_cpu_enable_fast_math=false"]))
    env = cache_child_env(tmp_path, {"XLA_FLAGS": flags, "TF_CPP_MIN_LOG_LEVEL": "1"})
    runs = []
    for _ in ("cold", "warm"):
        proc = subprocess.run([sys.executable, "-c", NOTHING_GLOBAL], env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stderr == "", proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout))
    for run in runs:
        before, after = run["env"]
        assert before == after == {"XLA_FLAGS": flags, "TF_CPP_MIN_LOG_LEVEL": "1"}, run
        assert set(run["changed"]) <= APPROXCV_JAX_SETTINGS, run["changed"]
        assert "jax_enable_x64" in run["changed"]
        assert run["listeners"][0] == run["listeners"][1], run["listeners"]
    cold, warm = runs
    assert cold["stored"] > 0 and cold["loaded"] == 0, cold
    assert warm["loaded"] > 0 and warm["stored"] == 0, warm
    assert warm["loss"] == cold["loss"]
    # the store off, JAX's cache on: its loads of approxcv's programs are silent too
    off = dict(env, **{_program_cache.DISABLE_ENV: "1",
                       _compilation_cache.DIR_ENV: str(tmp_path / "jax-only")})
    for _ in ("cold", "warm"):
        proc = subprocess.run([sys.executable, "-c", NOTHING_GLOBAL], env=off,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
        run = json.loads(proc.stdout)
        assert run["env"][0] == run["env"][1] and run["loss"] == cold["loss"], run
    assert list((tmp_path / "jax-only").glob("*/jit_*-cache"))       # JAX's cache was used
