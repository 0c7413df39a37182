"""A silent terminal: a normal run writes nothing to stderr, cold or warm (issue 39, item 3).

The README example (smaller: 800 call volumes, 40 folds, none of them unreliable — a real
warning would be stderr output too; the same code path) runs twice in
fresh processes on one fresh compilation-cache directory: the first compiles and fills the
cache, the second loads programs from it — where jaxlib 0.9-0.10 logs a C++ WARNING per
program (dropped around approxcv's loads), and on an AVX-512 CPU an ERROR unless the
program is capped at AVX2 (approxcv's are, per program: ``approxcv/_runtime/compilation_cache.py``)
— and both must leave stderr empty, progress bars included (stderr is a pipe here, not a terminal: ``approxcv/_progress.py``).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from approxcv import _progress
from approxcv._runtime import compilation_cache as _compilation_cache
from approxcv._runtime import program_cache as _program_cache
from tests.conftest import ROOT, cache_child_env

README_SMALL = """
import jax, jax.monitoring
hits = []
jax.monitoring.register_event_listener(
    lambda e, **k: hits.append(e) if e == "/jax/compilation_cache/cache_hits" else None)
import approxcv as acv
from approxcv._runtime import program_cache as _program_cache
# every program through the caches, however fast it compiled (this process compiles with
# the suite's settings, tests/conftest.py): every load must be silent
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
_program_cache.MIN_SECONDS = 0
x = acv.datasets.load_calls(800)
model = acv.models.PoissonHMM(n_states=2)
params = model.fit(x)
folds = acv.folds.iid(len(x), frac=0.1, n_folds=40, seed=0)
ij = acv.cross_validate(model, x, folds, method="ij", params=params, scheme="A")
print(len(hits) + _program_cache.stats["loaded"], acv.compilation_cache_dir,
      float(ij.fold_loss.sum()))
"""


def _run(cache, code=README_SMALL):
    env = cache_child_env(cache)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=600)


def test_readme_example_writes_nothing_to_stderr_cold_or_warm(tmp_path):
    cold, warm = _run(tmp_path), _run(tmp_path)
    for proc in (cold, warm):
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stderr == "", proc.stderr[-3000:]
    outputs = f"cold: {cold.stdout!r}, warm: {warm.stdout!r}"
    n_cold, where, loss_cold = cold.stdout.split()
    n_warm, _, loss_warm = warm.stdout.split()
    # on an AVX-512 CPU with an affected jaxlib too: the cache is on under the AVX2 cap
    assert Path(where).parent == tmp_path
    # the warm run did load cached programs (from JAX's cache or approxcv's program cache)
    assert int(n_cold) == 0 and int(n_warm) > 0, outputs
    assert float(loss_warm) == float(loss_cold), outputs


def test_cache_directory_is_per_cpu_and_movable(monkeypatch, tmp_path):
    monkeypatch.setenv(_compilation_cache.DIR_ENV, str(tmp_path))
    assert _compilation_cache.cache_dir() == tmp_path / _compilation_cache.cpu_tag()
    assert _compilation_cache.cpu_tag() == _compilation_cache.cpu_tag()


def test_a_tilde_in_a_cache_directory_is_expanded(monkeypatch, tmp_path):
    """``APPROXCV_COMPILATION_CACHE_DIR="~/..."`` (no shell expanded it) is the home
    directory's, never a literal ``~`` folder; so are ``$XDG_CACHE_HOME`` and the program
    cache's directory."""
    tag = _compilation_cache.cpu_tag()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(_compilation_cache.DIR_ENV, "~/acv")
    assert _compilation_cache.cache_dir() == tmp_path / "acv" / tag
    monkeypatch.delenv(_compilation_cache.DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "~/xdg")
    assert _compilation_cache.cache_dir() == tmp_path / "xdg" / "approxcv" / "jax" / tag
    _program_cache.use_directory("~/programs")
    try:
        assert _program_cache.directory() == tmp_path / "programs"
    finally:
        _program_cache.use_directory(None)
    # in a process that configures the cache, run from the home directory
    code = "import approxcv; print(approxcv.compilation_cache_dir)"
    env = cache_child_env("~/acv", {"HOME": str(tmp_path)})
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == [str(tmp_path / "acv" / tag)] and out.stderr == "", out
    assert not (tmp_path / "~").exists()


#: imports approxcv, compiles three small programs with JAX's cache consulted for each,
#: and prints the warnings seen (recorded, so that stderr holds only what escapes them),
#: then the cache directory in use and why it is off
CACHE_WARNINGS = """
import json, warnings
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    import approxcv as acv
    import jax, jax.numpy as jnp
    from approxcv._runtime import compilation_cache as _compilation_cache
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    for n in range(1, 4):
        jax.jit(lambda x: jnp.sin(x) * n)(jnp.ones(n)).block_until_ready()
print(json.dumps([[w.category.__name__, str(w.message)] for w in seen]))
print(acv.compilation_cache_dir, "|", _compilation_cache.off_reason)
"""


def _unusable_cache(base: Path, kind: str) -> Path:
    """A cache directory under ``base`` that JAX's cache cannot use: ``read-only``, its
    lock file a directory (``damaged``), or below a regular file (``under a file``)."""
    where = base / _compilation_cache.cpu_tag()
    if kind == "under a file":
        base.write_text("not a directory")
        return where
    where.mkdir(parents=True)
    if kind == "damaged":
        (where / ".lockfile").mkdir()           # JAX's lock file (jax/_src/lru_cache.py)
        return where
    where.chmod(0o555)
    try:
        (where / "probe").touch()
    except OSError:
        return where
    where.chmod(0o755)
    pytest.skip("a read-only directory can be written here (running as root: chmod does "
                "not stop root's writes); the 'damaged' and 'under a file' cases cover it")


@pytest.mark.parametrize("kind", ["read-only", "damaged", "under a file"])
def test_an_unusable_cache_directory_is_one_warning(tmp_path, kind):
    """A directory JAX's cache cannot use (once: JAX's raw ``UserWarning`` for every program
    read and written, or a silent fallback where it could not be created): one
    ``CompilationCacheWarning`` naming the directory, the cache off, nothing on stderr."""
    base = tmp_path / "cache"
    where = _unusable_cache(base, kind)
    try:
        proc = subprocess.run([sys.executable, "-c", CACHE_WARNINGS],
                              env=cache_child_env(base), capture_output=True, text=True,
                              timeout=300)
    finally:
        if where.exists():
            where.chmod(0o755)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
    seen, status = proc.stdout.splitlines()
    seen = json.loads(seen)
    assert [category for category, _ in seen] == ["CompilationCacheWarning"], seen
    assert str(where) in seen[0][1] and _compilation_cache.DISABLE_ENV in seen[0][1]
    in_use, off_reason = status.split(" | ")
    assert in_use == "None" and str(where) in off_reason


def test_loader_gate_needs_avx512_and_an_affected_jaxlib(monkeypatch):
    monkeypatch.setattr(_compilation_cache, "cpu_flags", lambda: frozenset({"avx512f"}))
    assert _compilation_cache.loader_flags_this_cpu("0.9.2")
    assert not _compilation_cache.loader_flags_this_cpu("0.11.0")
    monkeypatch.setattr(_compilation_cache, "cpu_flags", lambda: frozenset({"avx2"}))
    assert not _compilation_cache.loader_flags_this_cpu("0.9.2")


def test_an_affected_cpu_changes_no_flag_and_caches_only_approxcvs_programs(tmp_path):
    """An AVX-512 CPU with an affected jaxlib, on any machine (the gate is made to answer
    yes): ``XLA_FLAGS`` untouched, the cache on, approxcv's CPU programs compiled without
    an instruction-set cap (a per-program cap does not quiet the loader, only dropping its
    false lines does), and JAX's cache storing nothing of the user's (its threshold
    infinite outside approxcv's own compiles)."""
    code = ("import os, approxcv, approxcv._runtime.compilation_cache as cc\n"
            "cc.loader_flags_this_cpu = lambda version: True\n"
            "import jax\n"
            "from approxcv._runtime import compile as _compile\n"
            "print(approxcv.compilation_cache_dir is not None, os.environ.get('XLA_FLAGS'),\n"
            "      _compile.compiler_options('cpu').get('xla_cpu_max_isa'),\n"
            "      jax.config.jax_persistent_cache_min_compile_time_secs, cc.own_threshold,\n"
            "      float(jax.numpy.ones(3).sum()))")
    env = {k: v for k, v in os.environ.items()
           if k not in (_compilation_cache.DISABLE_ENV, "XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR")}
    env.update({_compilation_cache.DIR_ENV: str(tmp_path), "PYTHONPATH": str(ROOT)})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    assert out.stdout.split() == ["True", "None", "None", "inf",
                                  str(_compilation_cache.MIN_COMPILE_SECONDS), "3.0"], out
    assert out.stderr == "", out.stderr


QUIET_LOAD = r"""
import os, threading
from approxcv._runtime import workarounds as w
line = (b"W1203 00:15:59.487661    4063 pjrt_executable.cc:642] Assume version "
        b"compatibility. PjRt-IFRT does not track XLA executable versions.\n")
false = (b"E1203 06:16:51.121632    9865 cpu_aot_loader.cc:220] Loading XLA:CPU AOT result. "
         b"Target machine feature +%s is not  supported on the host machine. Machine type "
         b"used for XLA:CPU compilation doesn't match the machine type for execution.\n")
def load():
    with w.quiet_loader_warnings():
        os.write(2, line + false % b"prefer-no-gather" + false % b"prefer-no-scatter"
                 + b"E0000 00:00:00.0 1 other.cc:1] kept\n")
        with w.quiet_loader_warnings():             # nested: one redirection
            os.write(2, line + false % b"avx512f")      # a real mismatch: kept
threads = [threading.Thread(target=load) for _ in range(4)]
[t.start() for t in threads]; [t.join() for t in threads]
os.write(2, b"after\n")
"""


def test_the_loader_warning_is_dropped_around_approxcvs_loads_only():
    """Around approxcv's own load of a stored program (``quiet_loader_warnings``) the line
    jaxlib 0.9-0.10 logs for every load, and its false ERROR for LLVM tuning features on
    AVX-512 CPUs, are dropped; every other line is written back (a missing instruction set
    stays visible); stderr is restored afterwards, also when threads load at once."""
    proc = subprocess.run([sys.executable, "-c", QUIET_LOAD], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    real = [l for l in lines if "+avx512f is not" in l]
    assert len(real) == 4 and not any("prefer-" in l for l in lines), lines
    assert lines[-1] == "after"
    assert sorted(set(lines[:-1]) - set(real)) == ["E0000 00:00:00.0 1 other.cc:1] kept"]
    assert len(lines) == 9


def test_no_bar_where_nobody_watches(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert not _progress.watched()          # pytest captures stderr: not a terminal
    with _progress.progress_bar(3, "x", True) as bar:
        bar.update(3)
    assert capsys.readouterr().err == ""
