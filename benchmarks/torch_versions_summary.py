"""Summarise benchmarks/torch_versions_cpu.sh's outputs: the seed's table per torch version (from the sweep's
side-by-side JSON) and the doctor's NJT split per version (NJT-input part, Dynamo guards on NJT inputs vs on
the plain twin: count and guard-check time). Writes summary.json and summary.md into the results folder.

    python benchmarks/torch_versions_summary.py benchmarks/results/cpu/torch-versions
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _part(diagnosis: dict, key: str) -> float | None:
    return next((c["us"] for c in diagnosis.get("contributions", []) if c["key"] == key), None)


def doctor_rows(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    rows = []
    for cell in data["cells"]:
        e, d = cell["evidence"], cell["diagnosis"]
        g, pg = e["host"]["guards"], e["input_form"]["guards"] or {}
        rows.append({
            "torch": data["environment"].get("torch"), "implementation": e["implementation"], "case": e["case_label"],
            "eager_wall_us": d.get("eager_wall_us"), "compiled_wall_us": d.get("compiled_wall_us"),
            "delta_us": d.get("delta_us"), "njt_inputs_us": _part(d, "njt_inputs"), "guards_us": _part(d, "guards"),
            "guard_count_njt": e["host"]["dynamo"].get("guard_count"),
            "guard_count_plain": (e["input_form"].get("dynamo") or {}).get("guard_count"),
            "guard_check_us_njt": g.get("check_us"), "guard_check_us_plain": pg.get("check_us"),
            "guards_timed": bool(g.get("available")), "load": data["environment"].get("load"),
        })
    return rows


def _f(x, fmt=".1f") -> str:
    return "—" if x is None else format(x, fmt)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Summarise benchmarks/torch_versions_cpu.sh's outputs (the seed's table and the doctor's NJT split "
                    "per torch version) into summary.json and summary.md in the same folder.")
    parser.add_argument("folder", type=Path, help="the results folder torch_versions_cpu.sh wrote (its RES)")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():  # an option mistaken for the folder would otherwise be created and written into
        parser.error(f"{args.folder} is not a folder of torch_versions_cpu.sh's results")
    return args


def main(folder: Path) -> int:
    res = Path(folder)
    seed = json.loads((res / "seed.torch-versions.json").read_text()) if (res / "seed.torch-versions.json").exists() else None
    doctor = [row for p in sorted(res.glob("doctor-*.json")) for row in doctor_rows(p)]
    (res / "summary.json").write_text(json.dumps({"seed_table": seed, "doctor": doctor}, indent=1) + "\n")
    lines = ["# Torch versions on the CPU: the seed's shapes", "",
             "Command and load: `run.txt`. Machine: 2 shared cores (noisy; load recorded per step).", ""]
    if seed:
        lines += ["## The seed's table (wall median µs, p20–p80; speedup = eager / compiled)", ""]
        lines += (res / "seed.torch-versions.md").read_text().split("\n")[4:]
    lines += ["## The doctor's NJT split (compile:max-autotune-no-cudagraphs vs eager)", "",
              "| torch | implementation | case | eager µs | compiled µs | Δ µs | NJT-input part µs | guards part µs | "
              "guards NJT / plain | guard check µs NJT / plain | extra guard µs |", "|" + "---|" * 11]
    for r in doctor:
        extra = (r["guard_check_us_njt"] - r["guard_check_us_plain"]
                 if r["guard_check_us_njt"] is not None and r["guard_check_us_plain"] is not None else None)
        lines.append(f"| {r['torch']} | {r['implementation']} | {r['case']} | {_f(r['eager_wall_us'])} | "
                     f"{_f(r['compiled_wall_us'])} | {_f(r['delta_us'])} | {_f(r['njt_inputs_us'])} | {_f(r['guards_us'])} | "
                     f"{r['guard_count_njt']} / {r['guard_count_plain']} | {_f(r['guard_check_us_njt'], '.2f')} / "
                     f"{_f(r['guard_check_us_plain'], '.2f')} | {_f(extra, '.2f')} |")
    (res / "summary.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args().folder))
