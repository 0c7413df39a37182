"""Start-up of the ``approxcv`` command: ``approxcv --help`` and ``--version`` import no
numerics (``import approxcv`` imports no JAX; docs/design.md, "Layers"), so they take about
the start-up time of Python itself. Target: at most 0.3 s on a quiet machine.

Each command runs ``--repeats`` times in a fresh process (``python -m approxcv.cli ...``,
the same code as the console script); the JSON records the median and the fastest wall
time of each, beside a bare ``python -c pass`` and, for scale, ``import approxcv`` followed
by the import of JAX (what every command did before). Which modules were imported is read
from ``python -X importtime``: none of ``jax``, ``numpy``, ``pandas`` for ``--help``.

    python benchmarks/cli_startup.py            # benchmarks/results/cli_startup.json
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from _common import run, write_json

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "approxcv --help": ["-m", "approxcv.cli", "--help"],
    "approxcv --version": ["-m", "approxcv.cli", "--version"],
    "import approxcv, jax (for scale)": ["-c", "import approxcv, jax.numpy"],
}
HEAVY = ("jax", "jaxlib", "numpy", "pandas", "scipy", "matplotlib")


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _seconds(args, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, *args], env=_env(), check=True, capture_output=True)
        out.append(time.perf_counter() - t)
    return out


def heavy_imports(args) -> list[str]:
    """The top-level packages of :data:`HEAVY` that ``python -X importtime ARGS`` imports."""
    res = subprocess.run([sys.executable, "-X", "importtime", *args], env=_env(), check=True,
                         capture_output=True, text=True)
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0]
             for line in res.stderr.splitlines() if line.startswith("import time:")}
    return sorted(names & set(HEAVY))


def main(quick: bool) -> dict:
    repeats = 3 if quick else 15
    out = {"repeats": repeats, "python": sys.version.split()[0], "target_seconds": 0.3,
           "seconds": {}, "heavy_imports": {}}
    for name, args in COMMANDS.items():
        times = _seconds(args, repeats)
        out["seconds"][name] = {"median": statistics.median(times), "min": min(times)}
        if name.startswith("approxcv"):
            out["heavy_imports"][name] = heavy_imports(args)
        print(f"{name:34s} median {statistics.median(times):.3f} s, "
              f"min {min(times):.3f} s", flush=True)
    bare = out["seconds"]["python -c pass"]["min"]
    out["help_over_bare_python_seconds"] = out["seconds"]["approxcv --help"]["min"] - bare
    out["help_within_target"] = out["seconds"]["approxcv --help"]["min"] <= 0.3
    return out


def _main(quick: bool) -> dict:
    out = main(quick)
    write_json("cli_startup", quick, out)
    return out


if __name__ == "__main__":
    run(_main, __doc__)
