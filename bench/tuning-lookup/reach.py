#!/usr/bin/env python3
"""How far from its entries the tuning table should decide a wgmma GEMM call, offline.

For every GEMM method-shape of `tilegen tune`'s JSON lines (every member timed), the table
without that shape predicts a pick as `tuning::pick_tiled` does over its whole reach (the
emulation in judge.py), and the fixed rules pick by `call_checks::wgmma_cost` (the emulation in
rules_cost.py). Both are scored against the member times measured there. Printed:
  - both over all method-shapes, and by the distance of the nearest entry left in the table;
  - the rules' constants refitted on random halves of the shapes, both judged on the other
    halves;
  - the smallest distance between two shapes of one method, below which this cannot judge.

usage: reach.py MANIFEST TABLE TUNE.jsonl|TUNE.tar.xz...
"""
import itertools, json, random, statistics, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import judge, rules_cost as rc

g = statistics.geometric_mean


def main(manifest_path, table_path, runs):
    manifest, table = json.load(open(manifest_path)), json.load(open(table_path))
    insts = {i["name"]: i for i in manifest["instances"]}
    order = [i["name"] for i in manifest["instances"]]
    sms = table["device"]["sm_count"]
    by_method = {}
    for e in table["entries"]:
        if e["shape"] and len(e["shape"]) == 3 and e["instance"] in insts:
            by_method.setdefault(e["method"], []).append(e)
    recs = [r for r in rc.load(runs) if all(n in insts for n in r["times"])]
    rows = []
    for r in recs:
        m, n, k = r["shape"]
        t, best = r["times"], min(r["times"].values())
        rest = [e for e in by_method.get(r["method"], []) if tuple(e["shape"]) != r["shape"]]
        dists = [d for d in (judge.distance(list(r["shape"]), e["shape"]) for e in rest) if d is not None]
        rule = rc.gemm_order(m, n, k, list(t), rc.model_order(rc.MODEL))[0]
        pick = judge.tiled(rest, list(r["shape"]), sorted(t, key=order.index), insts, sms)
        if pick not in t:  # no entry within reach, or a member not timed here: the rules
            pick = rule
        rows.append(dict(r=r, table=t[pick] / best, near=min(dists, default=None)))
    print(f"{len(rows)} method-shapes, each left out of the table in turn:")
    print(f"  table's prediction: {g([x['table'] for x in rows]):.4f}, worst {max(x['table'] for x in rows):.2f}")
    rules = [x["r"]["times"][rc.gemm_order(*x["r"]["shape"], list(x["r"]["times"]), rc.model_order(rc.MODEL))[0]]
             / min(x["r"]["times"].values()) for x in rows]
    print(f"  rules (fitted on all): {g(rules):.4f}, worst {max(rules):.2f}")
    for lo, hi in ((0, 0.3), (0.3, 0.6), (0.6, 1.1), (1.1, 2.1), (2.1, 99)):
        part = [(x["table"], q) for x, q in zip(rows, rules) if x["near"] is not None and lo <= x["near"] < hi]
        if part:
            print(f"  nearest entry {lo}-{hi}: {len(part)}, table {g([a for a, _ in part]):.4f}, rules {g([b for _, b in part]):.4f}")
    grid = rc.GRID
    scored = [[x["r"]["times"][rc.gemm_order(*x["r"]["shape"], list(x["r"]["times"]), rc.model_order(P))[0]]
               / min(x["r"]["times"].values()) for x in rows] for P in grid]
    shapes = sorted({x["r"]["shape"] for x in rows})
    for seed in range(4):
        random.Random(seed).shuffle(shapes)
        half = set(shapes[: len(shapes) // 2])
        inside = [x["r"]["shape"] in half for x in rows]
        fit = min(range(len(grid)), key=lambda i: g([v for v, h in zip(scored[i], inside) if h]))
        out = [j for j, h in enumerate(inside) if not h]
        print(f"  half {seed}: rules fitted on the other half {g([scored[fit][j] for j in out]):.4f},"
              f" table {g([rows[j]['table'] for j in out]):.4f} ({len(out)} method-shapes)")
    closest = min(judge.distance(list(a), list(b)) or 99 for meth in {x["r"]["method"] for x in rows}
                  for a, b in itertools.combinations(sorted({x["r"]["shape"] for x in rows if x["r"]["method"] == meth}), 2))
    print(f"  the two nearest shapes of one method are {closest:.2f} apart")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
