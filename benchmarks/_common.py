"""Shared tail of the benchmark scripts: command line, JSON and PNG output.

Every script ``benchmarks/<name>.py`` has a ``main(quick)`` that returns a JSON-able dict and
a ``plot(out, path)``; :func:`run` parses ``--quick`` and :func:`write_results` writes
``benchmarks/results/<name>[_quick].json`` and ``.png`` (the quick outputs are git-ignored).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def child_json(script: str, *args: str, check: bool = True) -> dict:
    """``python script *args`` in a fresh process with an empty approxcv compilation cache
    of its own (a cold start); its last line of output parsed as JSON. A failed child
    raises ``CalledProcessError`` (``check``) or gives ``{"error": its last stderr line}``."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, APPROXCV_COMPILATION_CACHE_DIR=cache)
        run = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                             check=check, env=env)
    if run.returncode:
        return {"error": run.stderr.strip().splitlines()[-1] if run.stderr else "failed"}
    return json.loads(run.stdout.strip().splitlines()[-1])


def compile_counter() -> list:
    """``[n]``: the programs this process compiles (or loads from the persistent cache) from
    now on, counted by a ``jax.monitoring`` listener (JAX is imported here, not by scripts
    whose children must not load it)."""
    import jax
    count = [0]

    def on_duration(event, secs, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            count[0] += 1
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    return count


def write_json(name: str, quick: bool, out: dict) -> str:
    """Write ``out`` as ``results/<name>[_quick].json``; return the path stem."""
    os.makedirs(RESULTS, exist_ok=True)
    stem = os.path.join(RESULTS, name + ("_quick" if quick else ""))
    with open(stem + ".json", "w") as f:
        json.dump(out, f, indent=1, default=float)
    return stem


def write_results(name: str, quick: bool, out: dict, plot) -> str:
    """Write ``out`` as JSON and ``plot(out, png_path)``; return the path stem."""
    stem = write_json(name, quick, out)
    plot(out, stem + ".png")
    return stem


def run_stages(name: str, quick: bool, out: dict, stages) -> dict:
    """Run ``stages`` (``(key, stage)`` pairs) in order: ``out[key] = stage()`` (a tuple of
    keys takes a tuple of results), its wall time in ``out["stage_seconds"][key]`` (the
    first key), and ``out`` written as JSON after each stage, so that partial results
    survive a stop. Returns ``out``."""
    import time
    for keys, stage in stages:
        t = time.perf_counter()
        res = stage()
        if isinstance(keys, tuple):
            out.update(zip(keys, res))
            keys = keys[0]
        else:
            out[keys] = res
        out.setdefault("stage_seconds", {})[keys] = time.perf_counter() - t
        write_json(name, quick, out)
        print(f"{keys}: {out['stage_seconds'][keys]:.0f} s", flush=True)
    return out


def figure(*args, **kwargs):
    """``plt.subplots(*args, **kwargs)`` on the non-interactive Agg backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt.subplots(*args, **kwargs)


def save_figure(fig, path: str, title: str | None = None):
    """Add a title, lay out, save at 120 dpi and close."""
    import matplotlib.pyplot as plt
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(main, doc: str):
    """Command line ``python <script> [--quick]`` calling ``main(quick)``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fast smoke run")
    return main(parser.parse_args().quick)
