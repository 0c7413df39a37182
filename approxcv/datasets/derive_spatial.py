"""Regenerate the spatial count data sets (``sids*.csv``, ``columbus*.csv``) from the
examples shipped inside the libpysal wheel.

This is a developer-only script: libpysal is neither imported nor installed; its wheel is
unzipped and the dBASE (``.dbf``) attribute tables and GAL contiguity files of the
examples ``sids2`` and ``columbus`` are parsed here with the standard library.

Run, from the repository root, after ``pip download libpysal==4.14.1 --no-deps`` and
unzipping the wheel::

    python -m approxcv.datasets.derive_spatial --source <unzipped>/libpysal/examples

Written next to this file:

``sids.csv``
    one row per North Carolina county (the ``.dbf`` order): ``site`` (0-based),
    ``fipsno``, ``name``, ``births74``, ``sids74``, ``nonwhite_births74``, ``births79``,
    ``sids79``, ``nonwhite_births79`` (integers, unchanged; 1974-78 and 1979-84).
``sids_edges.csv``
    the county contiguity graph of ``sids2.gal`` as 0-based site pairs ``s < t``.
``columbus.csv``
    one row per Columbus, Ohio neighbourhood (the ``.dbf`` order): ``site``, ``polyid``,
    ``crime`` (residential burglaries and vehicle thefts per 1,000 households, 1980),
    ``hoval`` (housing value, $1,000), ``inc`` (household income, $1,000), ``x``, ``y``
    (centroid), values as printed in the ``.dbf``.
``columbus_edges.csv``
    the queen contiguity graph of ``columbus.gal`` as 0-based site pairs ``s < t``.

The script checks that every GAL file is symmetric, has no self-loops, and names exactly
the records of its ``.dbf``; the output is byte-for-byte deterministic.
"""
from __future__ import annotations

import argparse
import hashlib
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def read_dbf(path: Path) -> list[dict]:
    """Records of a dBASE III table as dicts of stripped ASCII strings (deleted records
    are an error: the examples have none)."""
    raw = path.read_bytes()
    n_records, header_len, record_len = struct.unpack("<IHH", raw[4:12])
    fields, pos = [], 32
    while raw[pos] != 0x0D:
        desc = raw[pos:pos + 32]
        fields.append((desc[:11].split(b"\0")[0].decode("ascii"), desc[16]))
        pos += 32
    rows = []
    for i in range(n_records):
        rec = raw[header_len + i * record_len:header_len + (i + 1) * record_len]
        if rec[:1] != b" ":
            raise RuntimeError(f"{path}: record {i} is marked deleted")
        off, row = 1, {}
        for name, length in fields:
            row[name] = rec[off:off + length].decode("ascii").strip()
            off += length
        rows.append(row)
    return rows


def read_gal(path: Path) -> dict[str, list[str]]:
    """``{id: [neighbour ids]}`` of a GAL file (header line, then pairs of lines
    ``id count`` / ``neighbours``)."""
    lines = path.read_text(encoding="ascii").split("\n")
    head = lines[0].split()
    n = int(head[1] if len(head) > 1 else head[0])
    out, i = {}, 1
    for _ in range(n):
        ident, count = lines[i].split()
        nbrs = lines[i + 1].split() if int(count) else []
        if len(nbrs) != int(count):
            raise RuntimeError(f"{path}: {ident} lists {len(nbrs)} neighbours, not {count}")
        out[ident] = nbrs
        i += 2 if int(count) else 1 + (lines[i + 1].strip() == "")
    return out


def edges_of(gal: dict, ids: list[str], path: Path) -> list[tuple[int, int]]:
    """0-based ``s < t`` pairs of a GAL graph over the records ``ids``, after checking it."""
    if sorted(gal) != sorted(ids):
        raise RuntimeError(f"{path}: ids differ from the attribute table's")
    index = {ident: i for i, ident in enumerate(ids)}
    pairs = set()
    for a, nbrs in gal.items():
        for b in nbrs:
            if a == b:
                raise RuntimeError(f"{path}: self-loop at {a}")
            if a not in gal.get(b, []):
                raise RuntimeError(f"{path}: {a} -> {b} is not symmetric")
            pairs.add((min(index[a], index[b]), max(index[a], index[b])))
    return sorted(pairs)


def _integer(text: str) -> int:
    value = float(text)
    if value != round(value) or value < 0:
        raise RuntimeError(f"expected a non-negative integer count, got {text!r}")
    return int(round(value))


def _write(path: Path, header: str, rows: list[str]) -> None:
    path.write_bytes((header + "\n" + "".join(r + "\n" for r in rows)).encode("ascii"))
    print(f"wrote {path.name}: {len(rows)} rows, sha256 "
          f"{hashlib.sha256(path.read_bytes()).hexdigest()}")


def derive(source: Path, out_dir: Path = HERE) -> None:
    """Write the four CSV files from ``source`` (the wheel's ``libpysal/examples``)."""
    sids = read_dbf(source / "sids2" / "sids2.dbf")
    ids = [r["FIPSNO"] for r in sids]
    edges = edges_of(read_gal(source / "sids2" / "sids2.gal"), ids, source / "sids2.gal")
    cols = ["BIR74", "SID74", "NWBIR74", "BIR79", "SID79", "NWBIR79"]
    _write(out_dir / "sids.csv",
           "site,fipsno,name,births74,sids74,nonwhite_births74,births79,sids79,"
           "nonwhite_births79",
           [",".join([str(i), r["FIPSNO"], r["NAME"]] + [str(_integer(r[c])) for c in cols])
            for i, r in enumerate(sids)])
    _write(out_dir / "sids_edges.csv", "s,t", [f"{s},{t}" for s, t in edges])

    col = read_dbf(source / "columbus" / "columbus.dbf")
    ids = [r["POLYID"] for r in col]
    edges = edges_of(read_gal(source / "columbus" / "columbus.gal"), ids,
                     source / "columbus.gal")
    _write(out_dir / "columbus.csv", "site,polyid,crime,hoval,inc,x,y",
           [",".join([str(i), r["POLYID"]] + [r[c] for c in ("CRIME", "HOVAL", "INC", "X",
                                                               "Y")])
            for i, r in enumerate(col)])
    _write(out_dir / "columbus_edges.csv", "s,t", [f"{s},{t}" for s, t in edges])


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: ``--source`` the unzipped wheel's ``libpysal/examples``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    derive(parser.parse_args(argv).source)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
