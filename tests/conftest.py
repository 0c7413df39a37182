import contextlib
import gc
import os
from pathlib import Path

# XLA's classic CPU emitters for every program of the test process, as approxcv's own
# programs already use (approxcv/_runtime/compile.py), and JAX's "disable most optimizations"
# (LLVM at -O0, no expensive passes): the suite's time is ~90 % compilation of programs
# that then run on tiny problems, and -O0 compiles them in about a third of the time
# (backend compilation 1,857 -> 698 s of the suite's worker time). The tests check
# numbers, with tolerances far above the last-bit differences of unoptimised code (a
# derivative that depended on such bits was a bug: the max-shift of the scaled forward
# pass, now a constant to the derivatives); the benchmarks and `approxcv demo` run fully
# optimised programs. And one LLVM module per program, not split for parallel code
# generation: with two test workers on two cores the split parts only add work (the HMM
# and engine tests: 140 -> 126 s on one core, measured side by side both ways round; one
# fit's optimiser program 1.2 -> 1.0 s. The README example's optimised programs in a cold
# process did not gain (IJ 6.3-7.7 s with XLA's default, 8.0-9.1 s with one module), so
# approxcv leaves it at XLA's default). Set before JAX initialises, so subprocesses of the
# tests inherit it.
os.environ["XLA_FLAGS"] = " ".join(
    filter(None, [os.environ.get("XLA_FLAGS"), "--xla_cpu_use_fusion_emitters=false",
                  "--xla_cpu_parallel_codegen_split_count=1"]))
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import approxcv as acv  # noqa: E402
from approxcv._runtime import compilation_cache as _compilation_cache  # noqa: E402
from approxcv._runtime import program_cache as _program_cache  # noqa: E402
from approxcv.optim.newton import value_and_derivatives  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop every compiled program after a test module once the worker maps more than
    :data:`MAX_MAPPED_REGIONS` memory regions: each executable maps its own (one module
    added up to 30k), and near the kernel's limit (65,530) XLA's compiler segfaulted or
    aborted in ``backend_compile_and_load``. Below the threshold the next modules reuse
    the compiled programs."""
    yield
    if _mapped_regions() > MAX_MAPPED_REGIONS:
        jax.clear_caches()
        _program_cache.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    """Release every compiled program and freeze what is left out of the garbage collector
    before the session's last hooks. At the end of a session pytest's unraisable-exception
    plugin runs ``gc.collect()`` five times; in an xdist worker holding thousands of JAX
    objects, on a loaded machine, that took longer than the 5 s execnet gives a worker to
    finish after the controller asks it to stop, and execnet then sends the worker a SIGINT:
    the ``KeyboardInterrupt`` landed in JAX's and hypothesis's gc callbacks and pytest
    printed it as two ``PytestUnraisableExceptionWarning`` tracebacks. Here the work runs
    before the worker reports that it has finished (xdist's own hook reports after this
    one), and the later collections pass over a frozen heap in milliseconds."""
    jax.clear_caches()
    _program_cache.clear()
    gc.collect()
    gc.freeze()


#: leaves room for the largest module's regions below the kernel's 65,530
MAX_MAPPED_REGIONS = 10_000


def _mapped_regions() -> int:
    """Lines of ``/proc/self/maps`` (above the threshold where it cannot be read)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return MAX_MAPPED_REGIONS + 1


#: programs compiled (or loaded from the persistent cache) in this process so far
_BACKEND_COMPILES = [0]


def _count_backend_compiles(event, seconds, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        _BACKEND_COMPILES[0] += 1


jax.monitoring.register_event_duration_secs_listener(_count_backend_compiles)


#: the repository root (a child process imports approxcv from it)
ROOT = Path(__file__).resolve().parents[1]


def cache_child_env(cache, extra=None) -> dict:
    """The environment of a child process that runs approxcv with its compilation and
    program caches under ``cache``: this process's switches of both caches and its cache
    directory dropped, then ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in (_compilation_cache.DISABLE_ENV, _program_cache.DISABLE_ENV,
                        "TF_CPP_MIN_LOG_LEVEL", "JAX_COMPILATION_CACHE_DIR")}
    env.update({_compilation_cache.DIR_ENV: str(cache), "PYTHONPATH": str(ROOT)})
    env.update(extra or {})
    return env


@contextlib.contextmanager
def backend_compiles():
    """Count the programs compiled (or loaded from JAX's cache or approxcv's program cache)
    in the block: ``with backend_compiles() as n: ...``, then ``n[0]``."""
    before = _BACKEND_COMPILES[0] + _program_cache.stats["loaded"]
    out = [0]
    yield out
    out[0] = _BACKEND_COMPILES[0] + _program_cache.stats["loaded"] - before


def fit_derivatives(problem):
    """``(F, g, H, J)`` of ``problem`` at its fit, ``w = 1``, from the compiled sweep the
    fit's Newton polish and the IJ use (:func:`approxcv.optim.newton.value_and_derivatives`
    with ``J``): tests that need derivatives at the fit compile no program of their own."""
    return value_and_derivatives(problem.fun, problem.u_full, np.ones(problem.n_units),
                                 problem.data, True)


def simulate_poisson_hmm(T, rates=(2.0, 9.0), stay=0.9, seed=0):
    """Counts from a 2-state sticky Poisson HMM."""
    rng = np.random.default_rng(seed)
    z = np.zeros(T, dtype=int)
    for t in range(1, T):
        z[t] = z[t - 1] if rng.random() < stay else 1 - z[t - 1]
    return rng.poisson(np.asarray(rates)[z]).astype(float)


def simulate_gaussian_hmm(T, R=2, seed=0, ar=0.0):
    rng = np.random.default_rng(seed)
    z = np.zeros(T, dtype=int)
    for t in range(1, T):
        z[t] = z[t - 1] if rng.random() < 0.92 else 1 - z[t - 1]
    means = np.array([[-1.0] * R, [1.5] * R])
    x = np.zeros((T, R))
    for t in range(T):
        prev = x[t - 1] if t > 0 else 0.0
        x[t] = means[z[t]] + ar * prev + 0.6 * rng.normal(size=R)
    return x


def simulate_overdispersed_counts(seed=2):
    """120 counts from 3 regimes of 12 steps with Gamma(3, 1/3) rate noise: a 4-state
    Poisson HMM fitted to them has several local optima (a deliberately misspecified fit)."""
    rng = np.random.default_rng(seed)
    z = np.repeat(rng.integers(0, 3, size=10), 12)
    noise = rng.gamma(3.0, 1 / 3.0, size=z.size)
    return rng.poisson(np.array([2.0, 4.0, 7.0])[z] * noise).astype(float)


@pytest.fixture(scope="session")
def poisson_local_optimum():
    """``(model, x, params)``: one start of ``PoissonHMM(4)`` fitted by BFGS ends in a local
    optimum (objective 277.37) that is not the best (perturbation restarts reach 274.36;
    so does EM from the same start, given 145 iterations: hence ``fit_em=False``)."""
    x = simulate_overdispersed_counts()
    model = acv.models.PoissonHMM(4, n_init=1, seed=2, fit_em=False)
    return model, x, model.fit(x)


@pytest.fixture(scope="session")
def poisson_small():
    """A fitted 2-state Poisson HMM on 120 simulated counts."""
    x = simulate_poisson_hmm(120, seed=1)
    model = acv.models.PoissonHMM(2, n_init=2)
    return model, x, model.fit(x)
