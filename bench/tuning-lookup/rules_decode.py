#!/usr/bin/env python3
"""The fixed GEMM rules at 1-16 rows, judged offline on `tilegen tune` JSON lines.

Each line holds every member's time at one shape and the fixed rules' pick as the tune that
wrote it computed them. For shapes of at most 16 rows this prints that pick's time over the
fastest member's, beside what `tilegen_runtime::call_checks::gemm_order` now puts first: the
swap-AB tile (wgmma, fewer than 64 rows) whose one row covers M, ordered among themselves as
`tile_order` orders tiles. Usage: rules_decode.py TUNE.jsonl... or a .tar.xz of them.
"""
import io, json, math, re, statistics, sys, tarfile

SMS = 132


def tile(name):
    m = re.search(r"_(\d+)x(\d+)x\d+_", name)
    return int(m.group(1)), int(m.group(2))


def tile_order(m, n, names):
    """`call_checks::tile_order`: tiles that make a tile per SM first, largest first; the rest smallest first."""
    count = lambda t: math.ceil(m / t[0]) * math.ceil(n / t[1])
    area = lambda t: t[0] * t[1]
    fill = [x for x in names if count(tile(x)) >= SMS]
    rest = [x for x in names if count(tile(x)) < SMS]
    return sorted(fill, key=lambda x: -area(tile(x))) + sorted(rest, key=lambda x: area(tile(x)))


def lines(paths):
    for p in paths:
        if p.endswith(".tar.xz"):
            with tarfile.open(p) as t:
                for member in t.getmembers():
                    yield from io.TextIOWrapper(t.extractfile(member))
        else:
            yield from open(p)


def main(paths):
    old, new = [], []
    for line in lines(paths):
        d = json.loads(line)
        if d.get("event") != "tuned":
            continue
        r = d["result"]
        m, n, _ = r["shape"]
        times = dict(r["times"])
        swaps = [x for x in times if "_wgmma" in x and m <= tile(x)[0] < 64]
        if m > 16 or not swaps:
            continue
        best = r["times"][0][1]
        pick = tile_order(m, n, swaps)[0]
        old.append(times[r["rule"]] / best)
        new.append(times[pick] / best)
        print(f"{r['method']:34s} {'x'.join(map(str, r['shape'])):15s} {r['rule']:64s} {old[-1]:5.2f}  {pick:54s} {new[-1]:5.2f}")
    g = statistics.geometric_mean
    print(f"{len(old)} method-shapes: the rules as tuned {g(old):.3f} (max {max(old):.2f}), swap-AB first {g(new):.3f} (max {max(new):.2f})")


if __name__ == "__main__":
    main(sys.argv[1:])
