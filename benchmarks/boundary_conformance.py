"""How often does jaggedperf.compile give another outcome than torch.compile on PyTorch's NJT OpInfo samples?

Runs ``jaggedperf.lab.conformance`` over the database (forward samples, backward samples, or both) on one backend
and writes the counts and every sample's outcome as JSON, with a Markdown summary beside it:

    python benchmarks/boundary_conformance.py --backend aot_eager_decomp_partition --json out.json

Exit status 1 when any sample differs.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

from jaggedperf.lab import conformance


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="aot_eager_decomp_partition")
    parser.add_argument("--grad", choices=("forward", "backward", "both"), default="both")
    parser.add_argument("--per-op", type=int, default=0, help="at most this many samples an op (0: all)")
    parser.add_argument("--ops", default="", help="a regular expression the op's full name must match")
    parser.add_argument("--json", required=True, type=Path)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)  # Dynamo logs every failed compile it is asked for; the report says them
    pattern = re.compile(args.ops) if args.ops else None
    report = conformance.Report()
    commit = _commit()  # the code this process runs: taken before the run, which a commit meanwhile would not change
    start = time.perf_counter()
    for requires_grad in {"forward": (False,), "backward": (True,), "both": (False, True)}[args.grad]:
        seen: dict[str, int] = {}
        for op, sample, name in conformance.samples(requires_grad,
                                                    ops=(lambda n: bool(pattern.search(n))) if pattern else None):
            if args.per_op and seen.get(op.full_name, 0) >= args.per_op:
                continue
            seen[op.full_name] = seen.get(op.full_name, 0) + 1
            report.results.append(conformance.run_sample(op, sample, name, args.backend))
    data = report.to_json()
    data["settings"] = {"backend": args.backend, "grad": args.grad, "per_op": args.per_op, "ops": args.ops,
                        "torch": torch.__version__, "python": platform.python_version(),
                        "seconds": round(time.perf_counter() - start, 1), "command": " ".join(sys.argv),
                        "commit": commit}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1))
    args.json.with_suffix(".md").write_text(markdown(data))
    sys.stdout.write(markdown(data))
    return 1 if report.differing() else 0


def markdown(data: dict) -> str:
    s = data["settings"]
    lines = [f"# jaggedperf.compile against torch.compile on PyTorch's NJT OpInfo samples ({s['backend']})", "",
             f"torch {s['torch']}, {s['grad']} samples, {data['compared']} compared in {s['seconds']} s; "
             f"commit {s['commit']}; command: `{s['command']}`", "", "| outcome | samples |", "|---|---:|"]
    lines += [f"| {kind} | {n} |" for kind, n in data["counts"].items()]
    differing = [r for r in data["results"] if r["outcome"] == conformance.DIFFERS]
    if differing:
        lines += ["", "Differing:", ""] + [f"- {r['op']} ({r['sample']}): {r['detail']}" for r in differing]
    return "\n".join(lines) + "\n"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src"]).returncode != 0
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
