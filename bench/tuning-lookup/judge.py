#!/usr/bin/env python3
"""Judge tuning-table lookups on measured GEMM shapes, offline.

Re-implements in Python the two lookups of `tilegen_runtime::tuning` for GEMM methods:
  nearest: the winner of the nearest entry (sum of |log2| ratios, every dimension within 4x);
  tiled:   `pick_tiled`, every member timed at an entry nearby (winner, runner-up, rules' pick)
           predicted at the call by its rounds of output tiles and by k, with the distance
           penalty; ties to the nearer entry, then the entry's ranking, then the lower member
           index. Over the whole 4x reach: where the fixed rules rank wgmma members by their
           cost model, `pick_tiled` now keeps only entries within `NEAR_DISTANCE` (reach.py
           judges that).
and reports how much slower each pick ran than the fastest instance, on
  - shapes measured by `tilegen --message-format json tune ...` (JSON lines given as arguments),
    against the table as given;
  - the table itself, leaving out each GEMM entry's shape in turn (only picks whose time the
    entry records, winner, runner-up or rules' pick, can be scored).

usage: judge.py MANIFEST TABLE [TUNE_JSONL ...]
"""
import json
import math
import sys

MAX_RATIO = 4.0
DISTANCE_PENALTY = 0.25


def distance(call, entry):
    if len(call) != len(entry):
        return None
    d = 0.0
    for c, e in zip(call, entry):
        r = abs(math.log2(c / e))
        if r > math.log2(MAX_RATIO):
            return None
        d += r
    return d


def rounds(inst, m, n, sms):
    g = inst["launch"]["grid"]
    tiles = math.ceil(m / g["tile_m"]) * math.ceil(n / g["tile_n"])
    at_once = max(1, sms * g.get("ctas_per_sm", 1) // g.get("cluster", 1))
    return math.ceil(tiles / at_once)


def timed(e):
    out = [(e["instance"], e["median_us"])]
    for name, us in [(e.get("runner_up"), e.get("runner_up_us")), (e["rule"], e["rule_us"])]:
        if name and all(n != name for n, _ in out):
            out.append((name, us))
    return out


def nearest(entries, shape):
    best = None
    for e in entries:
        d = distance(shape, e["shape"])
        if d is not None and (best is None or d < best[0]):
            best = (d, e["instance"])
    return best and best[1]


def tiled(entries, shape, members, insts, sms):
    m, n, k = shape
    near = {}
    for e in entries:
        d = distance(shape, e["shape"])
        if d is None:
            continue
        em, en, ek = e["shape"]
        for rank, (name, us) in enumerate(timed(e)):
            if name not in members:
                continue
            there = rounds(insts[name], em, en, sms)
            pred = us * rounds(insts[name], m, n, sms) / there * k / ek
            if name not in near or d < near[name][0]:
                near[name] = (d, pred, rank)
    best = None
    for name in sorted(near, key=members.index):
        d, pred, rank = near[name]
        score = (pred * (1 + DISTANCE_PENALTY * d), d, rank)
        if best is None or score < best[0]:
            best = (score, name)
    return best and best[1]


def summary(label, ratios):
    ratios = sorted(ratios)
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    over = lambda x: sum(r > x for r in ratios)
    print(f"  {label:24} n={len(ratios):4}  geomean {geo:.3f}  max {ratios[-1]:.3f}"
          f"  >1.05: {over(1.05):3}  >1.15: {over(1.15):3}")


def main():
    manifest, table = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
    insts = {i["name"]: i for i in manifest["instances"]}
    sms = table["device"]["sm_count"]
    gemm = [e for e in table["entries"] if e["shape"] and len(e["shape"]) == 3 and e["instance"] in insts
            and insts[e["instance"]]["op"].startswith("gemm")]
    by_method = {}
    for e in gemm:
        by_method.setdefault(e["method"], []).append(e)
    # Members per method in manifest order: every instance any entry or measurement names.
    order = [i["name"] for i in manifest["instances"]]

    def members_of(method, extra=()):
        names = {n for e in by_method.get(method, []) for n, _ in timed(e)} | set(extra)
        return sorted((n for n in names if n in insts), key=order.index)

    measured = []
    for path in sys.argv[3:]:
        for line in open(path):
            j = json.loads(line)
            if j.get("event") == "tuned" and len(j["result"]["shape"]) == 3:
                measured.append(j["result"])
    if measured:
        print(f"measured shapes against {sys.argv[2]}:")
        picks = {"fixed rules": [], "nearest entry": [], "tiled": []}
        for r in measured:
            t = dict(r["times"])
            best = r["times"][0][1]
            entries = by_method.get(r["method"], [])
            members = members_of(r["method"], t)
            for label, p in [("fixed rules", r["rule"]), ("nearest entry", nearest(entries, r["shape"])),
                             ("tiled", tiled(entries, r["shape"], members, insts, sms))]:
                picks[label].append(t.get(p, t[r["rule"]]) / best)
        for label, ratios in picks.items():
            summary(label, ratios)
    print(f"leave-one-out over the table's {len(gemm)} GEMM entries (scored where the pick's time is recorded):")
    scored = {"nearest entry": [], "tiled": []}
    for e in gemm:
        rest = [x for x in by_method[e["method"]] if x["shape"] != e["shape"]]
        known = dict(timed(e))
        members = members_of(e["method"])
        for label, p in [("nearest entry", nearest(rest, e["shape"])),
                         ("tiled", tiled(rest, e["shape"], members, insts, sms))]:
            if p in known:
                scored[label].append(known[p] / e["median_us"])
    for label, ratios in scored.items():
        summary(label, ratios)
        print(f"  {'':24} the entry's winner picked: {sum(r == 1 for r in ratios)}")


if __name__ == "__main__":
    main()
