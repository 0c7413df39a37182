"""Where approxcv runs a model's programs (``approxcv._runtime.placement``).

This machine has no accelerator, so an accelerator is simulated by making JAX report
``"gpu"`` as its default backend: the decisions (which device, which compile options, how
many threads) are then taken as on a GPU machine, and the programs still run on the CPU.
"""
import threading

import cloudpickle
import jax
import numpy as np
import pytest

import approxcv as acv
from approxcv._runtime import placement as _placement
from approxcv._runtime.compile import compiler_options
from approxcv.errors import InvalidArgumentError
from approxcv.executors import host_workers
from approxcv.models.hmm import base as hmm_base


@pytest.fixture
def on_gpu(monkeypatch):
    """JAX's default backend reported as a GPU (the programs still run on the CPU)."""
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.delenv("APPROXCV_DEVICE", raising=False)


def test_sequential_work_goes_to_the_cpu_beside_an_accelerator(on_gpu, monkeypatch):
    monkeypatch.setenv("APPROXCV_THREADS", "3")          # the CPU's thread count, if asked
    cpu = jax.devices("cpu")[0]
    assert _placement.placement_device("sequential") == cpu
    assert _placement.placement_device(None) is None          # a GP, a CRF: the GPU
    assert _placement.placement_device("sequential", "default") is None
    assert _placement.placement_device(None, "cpu") == cpu
    assert _placement.current_platform() == "gpu"
    assert host_workers() == 1
    with _placement.placed("sequential") as platform:
        assert platform == "cpu" and _placement.current_platform() == "cpu"
        assert host_workers() == 3 and compiler_options("cpu") is not None
        assert _placement.device_choice() == "auto"
    assert _placement.current_platform() == "gpu"


def test_on_a_cpu_machine_nothing_moves(monkeypatch):
    monkeypatch.delenv("APPROXCV_DEVICE", raising=False)
    assert jax.default_backend() == "cpu"
    assert _placement.placement_device("sequential") is None


def test_a_nested_block_follows_the_outer_choice(on_gpu):
    with _placement.placed(None, "default"):
        assert _placement.device_choice() == "default"
        with _placement.placed("sequential") as platform:   # a fit inside cross_validate
            assert platform == "gpu"
    with _placement.placed(None, "cpu"):
        with _placement.placed(None) as platform:
            assert platform == "cpu"


def test_worker_threads_run_under_the_callers_placement(on_gpu):
    seen = {}

    def work(tag):
        seen[tag] = _placement.current_platform()
    with _placement.placed("sequential"):
        plain = threading.Thread(target=work, args=("plain",))
        carried = threading.Thread(target=_placement.carry_placement(work),
                                   args=("carried",))
        for t in (plain, carried):
            t.start()
            t.join()
    assert seen == {"plain": "gpu", "carried": "cpu"}


def test_the_choice_is_checked(monkeypatch):
    with pytest.raises(InvalidArgumentError, match="`device` must be one of"):
        acv.cross_validate(acv.models.PoissonHMM(2), np.ones(20), [[0]], device="gpu")
    monkeypatch.setenv("APPROXCV_DEVICE", "tpu")
    with pytest.raises(InvalidArgumentError, match="APPROXCV_DEVICE"):
        _placement.device_choice()
    monkeypatch.setenv("APPROXCV_DEVICE", "default")
    assert _placement.device_choice() == "default"
    assert _placement.device_choice("cpu") == "cpu"            # the argument wins


def test_cross_validate_places_an_hmm_and_records_it(on_gpu, monkeypatch):
    """The fit and the IJ of an HMM run on the CPU beside a (simulated) GPU, with the same
    numbers as JAX's default placement gives; ``device="default"`` keeps them there."""
    fit_platforms = []
    fit_from = hmm_base.HMM._fit_from

    def recorded(self, *args):
        fit_platforms.append(_placement.current_platform())
        return fit_from(self, *args)
    monkeypatch.setattr(hmm_base.HMM, "_fit_from", recorded)
    x = acv.datasets.load_calls(120)
    folds = acv.folds.contiguous(len(x), 0.1, 4, seed=0)
    model = acv.models.PoissonHMM(2, n_init=2)
    placed_run = acv.cross_validate(model, x, folds, "ij", progress=False, warn=False)
    kept_run = acv.cross_validate(model, x, folds, "ij", progress=False, warn=False,
                                  device="default")
    assert fit_platforms == ["cpu", "gpu"]
    assert placed_run.diagnostics["device"] == "cpu"
    assert kept_run.diagnostics["device"] == "gpu"
    np.testing.assert_allclose(placed_run.fold_loss, kept_run.fold_loss, rtol=1e-9)


def _platform_now():
    return _placement.current_platform()


def test_the_placement_travels_with_pickled_work(on_gpu):
    """Work for a process pool or Dask workers is pickled: it carries the placement."""
    with _placement.placed("sequential"):
        task = _placement.carry_placement(_platform_now)
    assert _placement.carry_placement(_platform_now) is _platform_now   # nothing placed
    assert cloudpickle.loads(cloudpickle.dumps(task))() == "cpu"
