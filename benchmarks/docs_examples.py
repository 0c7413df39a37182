"""Run every ```python block of README.md and docs/*.md as a script, and time each one.

Each block is written to ``block.py`` in a fresh temporary directory (its working directory)
and run by this Python in a new process, with the repository first on ``PYTHONPATH`` (so a
checkout's approxcv is the one run). A block is a newcomer's script: its imports and data are
in it, nothing carries over from the block before.

Markers, as HTML comments on the lines just above a fence (several may share one comment,
separated by ``;``):

* ``<!-- no-run: why -->`` a block that cannot run as written (an output listing, a
  fragment): listed as ``no-run``, never run;
* ``<!-- skip: why -->`` a complete script that needs what this runner cannot provide
  (a running Dask scheduler): reported ``skipped`` with the reason;
* ``<!-- needs: pkg, pkg -->`` optional packages outside approxcv's dependencies
  (import names); a block whose package is missing is ``skipped``, with the reason;
* ``<!-- long -->`` a block that takes minutes: ``--quick`` skips it.

Skipped blocks are never counted as passing. The table goes to stdout and the records
(file, block, line, status, seconds, the tail of stderr) to
``benchmarks/results/docs_examples.json`` (``docs_examples_quick.json``, git-ignored, for
``--quick`` or ``--only``). Exit status 1 when a block fails or
times out.

Usage: python benchmarks/docs_examples.py [--quick] [--only docs/erm.md[#2]] [--timeout 600]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
_MARKER = re.compile(r"<!--(.*?)-->")


@dataclass
class Block:
    """One ```python block: where it is, its source and its markers."""

    file: str                       # path relative to the repository
    index: int                      # 1-based, among the file's python blocks
    line: int                       # 1-based line of the opening fence
    source: str
    markers: dict = field(default_factory=dict)   # {"no-run": why, "long": "", "needs": ...}

    @property
    def name(self) -> str:
        return f"{self.file}#{self.index}"


def doc_files(root: Path = REPO) -> list[Path]:
    """README.md and docs/*.md, in that order."""
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def _markers(comment_lines: list[str]) -> dict:
    out = {}
    for text in comment_lines:
        for body in _MARKER.findall(text):
            for item in body.split(";"):
                key, _, value = item.strip().partition(":")
                if key.strip():
                    out[key.strip().lower()] = value.strip()
    return out


def parse_blocks(path: Path, root: Path = REPO) -> list[Block]:
    """The ```python blocks of one Markdown file, with the markers on the lines above each."""
    lines = path.read_text().splitlines()
    rel = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    blocks, i = [], 0
    while i < len(lines):
        fence = lines[i]
        if fence.startswith("```"):
            lang = fence[3:].strip().split()[0].lower() if fence[3:].strip() else ""
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if lang in ("python", "py"):
                k, comments = i - 1, []
                while k >= 0 and lines[k].strip().startswith("<!--"):
                    comments.insert(0, lines[k])
                    k -= 1
                blocks.append(Block(rel, len(blocks) + 1, i + 1,
                                    "\n".join(lines[i + 1:j]) + "\n", _markers(comments)))
            i = j + 1
        else:
            i += 1
    return blocks


def all_blocks(only: list[str] | None = None, root: Path = REPO) -> list[Block]:
    """Every block, or those of ``only``: files (``docs/erm.md``) or blocks (``docs/erm.md#2``)."""
    files = doc_files(root)
    if not only:
        return [b for f in files for b in parse_blocks(f, root)]
    wanted = {}
    for o in only:
        path, _, index = o.partition("#")
        wanted.setdefault(Path(path).resolve(), set()).add(int(index) if index else None)
    out = []
    for f in files:
        if (picks := wanted.get(f.resolve())) is not None:
            out += [b for b in parse_blocks(f, root) if None in picks or b.index in picks]
    if not out:
        raise SystemExit(f"--only {only}: no block of README.md, docs/*.md")
    return out


def _missing(needs: str) -> list[str]:
    names = [n.strip() for n in needs.replace(",", " ").split() if n.strip()]
    return [n for n in names if importlib.util.find_spec(n) is None]


def run_block(block: Block, timeout: float, quick: bool) -> dict:
    """Run one block in a fresh process; return its record."""
    rec = {"file": block.file, "block": block.index, "line": block.line,
           "status": None, "seconds": None, "reason": "", "stderr_tail": ""}
    m = block.markers
    if "no-run" in m:
        rec.update(status="no-run", reason=m["no-run"] or "marked no-run")
        return rec
    if "skip" in m:
        rec.update(status="skipped", reason=m["skip"] or "marked skip")
        return rec
    if "needs" in m and (missing := _missing(m["needs"])):
        rec.update(status="skipped", reason="needs " + ", ".join(missing) + " (not installed)")
        return rec
    if quick and "long" in m:
        rec.update(status="skipped", reason="long (--quick)")
        return rec
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in
                                        env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("MPLBACKEND", "Agg")
    with tempfile.TemporaryDirectory(prefix="docs_example_") as tmp:
        script = Path(tmp) / "block.py"
        script.write_text(block.source)
        t = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, str(script)], cwd=tmp, env=env,
                                  capture_output=True, text=True, timeout=timeout)
            rec["seconds"] = time.perf_counter() - t
            rec["status"] = "pass" if proc.returncode == 0 else "fail"
            err = proc.stderr
            rec["stdout_tail"] = proc.stdout[-2000:]
            if proc.returncode:
                rec["reason"] = f"exit {proc.returncode}"
        except subprocess.TimeoutExpired as e:
            rec["seconds"] = time.perf_counter() - t
            rec.update(status="timeout", reason=f"over {timeout:.0f} s")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        # the tails name the block and the package by relative paths, not this machine's
        for key, text in (("stderr_tail", err), ("stdout_tail", rec.get("stdout_tail", ""))):
            rec[key] = (text.replace(str(script), "block.py")
                        .replace(str(REPO) + os.sep, ""))[-2000:]
    return rec


def table(records: list[dict]) -> str:
    rows = [("file", "block", "line", "status", "seconds", "reason")]
    for r in records:
        secs = "" if r["seconds"] is None else f"{r['seconds']:.1f}"
        rows.append((r["file"], str(r["block"]), str(r["line"]), r["status"], secs, r["reason"]))
    widths = [max(len(row[c]) for row in rows) for c in range(5)]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row[:5], widths)) + "  " + row[5]
                     for row in rows)


def _summary(args, records: list[dict], t0: float) -> dict:
    return {"python": sys.version.split()[0], "cpus": os.cpu_count(),
            "timeout_s": args.timeout, "quick": args.quick, "only": args.only,
            "total_seconds": time.perf_counter() - t0,
            "counts": {s: sum(r["status"] == s for r in records)
                       for s in ("pass", "fail", "timeout", "skipped", "no-run")},
            "blocks": records}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", metavar="FILE",
                    help="run only this file's blocks, or one block: docs/erm.md#2 (repeatable)")
    ap.add_argument("--quick", action="store_true", help="skip blocks marked <!-- long -->")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per block (600)")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/docs_examples.json)")
    args = ap.parse_args(argv)
    blocks = all_blocks(args.only)
    records = []
    stem = "docs_examples" + ("_quick" if args.quick or args.only else "")
    out = Path(args.out) if args.out else RESULTS / (stem + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    summary = _summary(args, records, t0)
    for b in blocks:
        print(f"{b.name} (line {b.line}) ...", end=" ", flush=True)
        rec = run_block(b, args.timeout, args.quick)
        records.append(rec)
        secs = "" if rec["seconds"] is None else f" {rec['seconds']:.1f} s"
        print(rec["status"] + secs, flush=True)
        if rec["status"] in ("fail", "timeout"):
            print("    " + rec["stderr_tail"][-800:].replace("\n", "\n    "), flush=True)
        summary = _summary(args, records, t0)
        out.write_text(json.dumps(summary, indent=1))
    print()
    print(table(records))
    print(f"\n{summary['counts']}; {summary['total_seconds']:.0f} s in all; {out}")
    return 1 if summary["counts"]["fail"] or summary["counts"]["timeout"] else 0


if __name__ == "__main__":
    sys.exit(main())
