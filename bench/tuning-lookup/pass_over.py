#!/usr/bin/env python3
"""What the fixed GEMM rules pick with and without some members, judged on `tilegen tune` JSON
lines: for each method-shape, the cost model's first pick when the rules pass over the members
whose name contains PATTERN (as they did over `tuning: table_only` ones) and when they do not,
each as its time over the fastest member's. Methods without such a member are left out.
Usage: pass_over.py PATTERN TUNE.jsonl|TUNE.tar.xz...   (e.g. _128x192x64_s4_)
"""
import statistics, sys

import rules_cost as rc


def main(pattern, paths):
    order = rc.model_order(rc.MODEL)
    short = lambda name: name.split("_wgmma")[0]
    rows = []
    for r in sorted(rc.load(paths), key=lambda r: (r["method"], r["shape"])):
        names, t = list(r["times"]), r["times"]
        if not any(pattern in x for x in names):
            continue
        before = rc.gemm_order(*r["shape"], names, order, table_only=(pattern,))[0]
        after = rc.gemm_order(*r["shape"], names, order)[0]
        best = min(t, key=t.get)
        rows.append((r["method"], t[before] / t[best], t[after] / t[best]))
        print(f"{r['method']:24s} {'x'.join(map(str, r['shape'])):16s} "
              f"passed over: {short(before):26s} {t[before] / t[best]:.3f}  "
              f"candidate: {short(after):26s} {t[after] / t[best]:.3f}  "
              f"fastest {short(best)} {t[best]:.1f} us")
    g = statistics.geometric_mean
    for meth in sorted({x[0] for x in rows}) + [None]:
        v = [x for x in rows if meth in (None, x[0])]
        print(f"{meth or 'all':24s} {len(v):3d} method-shapes: passed over {g([x[1] for x in v]):.3f} "
              f"(worst {max(x[1] for x in v):.3f}), candidate {g([x[2] for x in v]):.3f} "
              f"(worst {max(x[2] for x in v):.3f})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
