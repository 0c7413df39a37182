"""Peak memory of leave-one-out IJ at T = 10,000 (PoissonHMM(2), all 10,000 folds).

Issue target: under 2 GB peak. Folds travel as index arrays and weights are built per batch,
so memory no longer grows as ``n_folds x n``. Runs the job in a fresh subprocess and reads
its peak resident set size (``ru_maxrss``); writes ``benchmarks/results/memory_loo.json``.

    python benchmarks/memory_loo.py [--quick]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from _common import write_json

JOB = """
import time, resource, json
import approxcv as acv
T = {T}
x = acv.datasets.load_calls(T)
model = acv.models.PoissonHMM(2, n_init=2)
t = time.perf_counter(); params = model.fit(x); fit = time.perf_counter() - t
after_fit = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
res = acv.cross_validate(model, x, acv.folds.leave_one_out(T), "ij", params=params,
                         progress=False)
ij = time.perf_counter() - t
print(json.dumps({{"T": T, "n_folds": len(res), "fit_seconds": fit, "ij_seconds": ij,
                  "peak_rss_after_fit_mb": after_fit / 1024,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "n_unreliable": len(res.diagnostics["unreliable_folds"]),
                  "mean_point_loss": float(res.summary()["mean_point_loss"])}}))
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="T = 2,000 instead of 10,000")
    args = parser.parse_args(argv)
    T = 2000 if args.quick else 10_000
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", JOB.format(T=T)], capture_output=True,
                         text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(wall_seconds=time.perf_counter() - t, target_peak_mb=2048,
                  meets_target=result["peak_rss_mb"] < 2048)
    print(json.dumps(result, indent=2))
    write_json("memory_loo", args.quick, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
