"""Regenerate ``basic_motions.npz`` from the BasicMotions ``.ts`` files bundled in ``aeon``.

Developer-only: ``aeon`` (PyPI, BSD-3-Clause) is *not* imported — its package directory is
only located (``importlib.util.find_spec``, which does not run ``aeon/__init__.py``), so
neither aeon nor its dependencies become runtime dependencies of approxcv. Either install it
(``pip install aeon==1.6.0``) or point ``--source`` at a directory holding
``BasicMotions_TRAIN.ts`` and ``BasicMotions_TEST.ts`` (for example one unpacked from the
aeon wheel: ``aeon/datasets/data/BasicMotions``)::

    python -m approxcv.datasets.derive_basic_motions [--source DIR]

The output ``basic_motions.npz`` (next to this file) holds

``values``       int32 ``(80, 100, 6)``: the measurements times 1e6 (the ``.ts`` files carry
                 exactly six decimals, so this is lossless; ``load_basic_motions`` divides);
``labels``       int64 ``(80,)``: index into ``class_names``;
``class_names``  ``<U9`` ``(4,)``: the class labels in the order of the ``.ts`` header
                 (``Standing Running Walking Badminton``);
``is_train``     bool ``(80,)``: True for the 40 sequences of aeon's TRAIN file, which come
                 first (TRAIN then TEST, each in file order).

Channels 0-2 are the 3D accelerometer and 3-5 the 3D gyroscope (the order of the ``.ts``
dimensions).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import sys
from pathlib import Path

import numpy as np

N_SEQUENCES, N_STEPS, N_CHANNELS = 80, 100, 6
SCALE = 1_000_000


def aeon_data_dir() -> Path:
    """Directory of aeon's bundled BasicMotions files (aeon located, not imported)."""
    spec = importlib.util.find_spec("aeon")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("aeon is not installed; `pip install aeon` or pass --source DIR")
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "BasicMotions"


def read_ts(path: Path):
    """Parse an equal-length multivariate ``.ts`` file: ``(values (N, T, R) int, labels, classes)``.

    Each data line is ``dim_0:dim_1:...:dim_{R-1}:label`` with comma-separated values.
    Values are converted to integers of ``1e-6`` units after checking they have at most six
    decimals.
    """
    classes, rows, labels = None, [], []
    in_data = False
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not in_data:
            low = line.lower()
            if low.startswith("@classlabel"):
                parts = line.split()
                classes = parts[2:] if parts[1].lower() == "true" else None
            elif low.startswith("@data"):
                in_data = True
            continue
        *dims, label = line.split(":")
        seq = []
        for d in dims:
            fields = d.split(",")
            for f in fields:
                if "." in f and len(f.split(".")[1]) > 6:
                    raise RuntimeError(f"{path.name}: value {f!r} has more than six decimals")
            seq.append([round(float(f) * SCALE) for f in fields])
        rows.append(np.array(seq, dtype=np.int64).T)  # (T, R)
        labels.append(label)
    if classes is None:
        raise RuntimeError(f"{path.name}: no @classLabel header")
    return np.stack(rows), labels, classes


def derive(source: Path | None = None, out_path: Path | None = None) -> Path:
    """Read TRAIN and TEST, check them, write ``basic_motions.npz``; return its path."""
    source = Path(source) if source is not None else aeon_data_dir()
    out_path = out_path or Path(__file__).resolve().with_name("basic_motions.npz")
    parts = [read_ts(source / f"BasicMotions_{split}.ts") for split in ("TRAIN", "TEST")]
    classes = parts[0][2]
    if parts[1][2] != classes or len(classes) != 4:
        raise RuntimeError(f"unexpected class labels {parts[0][2]} / {parts[1][2]}")
    values = np.concatenate([p[0] for p in parts])
    if values.shape != (N_SEQUENCES, N_STEPS, N_CHANNELS):
        raise RuntimeError(f"expected {(N_SEQUENCES, N_STEPS, N_CHANNELS)}, got {values.shape}")
    if np.abs(values).max() >= 2 ** 31:
        raise RuntimeError("values do not fit int32 at 1e-6 resolution")
    labels = np.array([classes.index(lab) for p in parts for lab in p[1]], dtype=np.int64)
    is_train = np.repeat([True, False], [len(parts[0][0]), len(parts[1][0])])
    buf = io.BytesIO()
    np.savez_compressed(buf, values=values.astype(np.int32), labels=labels,
                        class_names=np.array(classes), is_train=is_train)
    out_path.write_bytes(buf.getvalue())
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
               for p in sorted(source.glob("BasicMotions_*.ts"))}
    for name, digest in digests.items():
        print(f"source {name} sha256 {digest}")
    print(f"classes {classes}; per class {np.bincount(labels).tolist()}; "
          f"train {int(is_train.sum())}, test {int((~is_train).sum())}")
    print(f"wrote {out_path} ({out_path.stat().st_size} bytes), "
          f"sha256 {hashlib.sha256(out_path.read_bytes()).hexdigest()}")
    return out_path


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: ``[--source DIR] [--out PATH]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None,
                        help="directory with BasicMotions_TRAIN.ts / _TEST.ts (default: aeon's)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    derive(args.source, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
