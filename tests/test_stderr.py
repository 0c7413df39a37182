"""A silent terminal: a normal run writes nothing to stderr, cold or warm (issue 39, item 3).

The README example (smaller: 800 call volumes, 40 folds, none of them unreliable — a real
warning would be stderr output too; the same code path) runs twice in
fresh processes on one fresh compilation-cache directory: the first compiles and fills the
cache, the second loads programs from it — where jaxlib 0.9-0.10 logs a C++ WARNING per
program (``approxcv/_compilation_cache.py``) — and both must leave stderr empty, progress
bars included (stderr is a pipe here, not a terminal: ``approxcv/_progress.py``).
"""
import os
import subprocess
import sys
from pathlib import Path

from approxcv import _compilation_cache, _progress

ROOT = Path(__file__).resolve().parents[1]

README_SMALL = """
import jax.monitoring
hits = []
jax.monitoring.register_event_listener(
    lambda e, **k: hits.append(e) if e == "/jax/compilation_cache/cache_hits" else None)
import approxcv as acv
x = acv.datasets.load_calls(800)
model = acv.models.PoissonHMM(n_states=2)
params = model.fit(x)
folds = acv.folds.iid(len(x), frac=0.1, n_folds=40, seed=0)
ij = acv.cross_validate(model, x, folds, method="ij", params=params, scheme="A")
print(len(hits), acv.compilation_cache_dir, float(ij.fold_loss.sum()))
"""


def _run(cache, code=README_SMALL):
    env = {k: v for k, v in os.environ.items()
           if k not in (_compilation_cache.DISABLE_ENV, "TF_CPP_MIN_LOG_LEVEL",
                        "JAX_COMPILATION_CACHE_DIR")}
    env.update({_compilation_cache.DIR_ENV: str(cache), "PYTHONPATH": str(ROOT)})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=600)


def test_readme_example_writes_nothing_to_stderr_cold_or_warm(tmp_path):
    cold, warm = _run(tmp_path), _run(tmp_path)
    for proc in (cold, warm):
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stderr == "", proc.stderr[-3000:]
    n_cold, where, loss_cold = cold.stdout.split()
    n_warm, _, loss_warm = warm.stdout.split()
    if where == "None":         # an AVX-512 CPU with an affected jaxlib: the cache stays off
        assert _compilation_cache.loader_flags_this_cpu(_jaxlib_version())
        return
    assert Path(where).parent == tmp_path
    assert int(n_cold) == 0 and int(n_warm) > 0     # the warm run did load cached programs
    assert float(loss_warm) == float(loss_cold)


def _jaxlib_version():
    import jaxlib
    return jaxlib.__version__


def test_cache_directory_is_per_cpu_and_movable(monkeypatch, tmp_path):
    monkeypatch.setenv(_compilation_cache.DIR_ENV, str(tmp_path))
    assert _compilation_cache.cache_dir() == tmp_path / _compilation_cache.cpu_tag()
    assert _compilation_cache.cpu_tag() == _compilation_cache.cpu_tag()


def test_loader_gate_needs_avx512_and_an_affected_jaxlib(monkeypatch):
    monkeypatch.setattr(_compilation_cache, "cpu_flags", lambda: frozenset({"avx512f"}))
    assert _compilation_cache.loader_flags_this_cpu("0.9.2")
    assert not _compilation_cache.loader_flags_this_cpu("0.11.0")
    monkeypatch.setattr(_compilation_cache, "cpu_flags", lambda: frozenset({"avx2"}))
    assert not _compilation_cache.loader_flags_this_cpu("0.9.2")


def test_a_log_level_the_user_chose_is_kept(monkeypatch):
    calls = []
    monkeypatch.setattr(_compilation_cache, "_absl_set_min_log_level", lambda: calls.append)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    assert not _compilation_cache.quiet_cpp_warnings() and not calls
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")         # JAX's default
    assert _compilation_cache.quiet_cpp_warnings() and calls == [2]
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "2"


def test_no_bar_where_nobody_watches(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert not _progress.watched()          # pytest captures stderr: not a terminal
    with _progress.progress_bar(3, "x", True) as bar:
        bar.update(3)
    assert capsys.readouterr().err == ""
