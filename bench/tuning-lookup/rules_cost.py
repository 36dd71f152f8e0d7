#!/usr/bin/env python3
"""The fixed GEMM rules' pick judged offline on `tilegen tune` JSON lines, before and after the
cost model of `tilegen_runtime::call_checks::wgmma_cost`.

Every tuned line holds each member's time at one shape. For each method-shape this takes the
line with the most members (the newest library), emulates `call_checks::gemm_order` with the
old tensor-map order (`tile_order`: the largest tile that gives every SM one, else the
smallest) and with the cost model, and prints the pick's time over the fastest member's:
geometric mean, worst, by rows of M, and the model's constants refitted on random halves of the
shapes and judged on the other halves. Usage: rules_cost.py TUNE.jsonl|TUNE.tar.xz...
"""
import io, itertools, json, math, random, re, statistics, sys, tarfile

SMS = 132
DECODE_ROWS, WGMMA_ROWS = 16, 64
# call_checks::wgmma_cost's constants, in units of one B column loaded for one k; t is paid
# once per tile; an operand whose rows are not whole 128-byte lines apart loads 1 + p times.
MODEL = dict(a=1 / 40, wa=2, f=64, sp=100, t=24000, p=1)
# The constants tried when refitting (rules_cost.py and reach.py).
GRID = [dict(a=a, wa=wa, f=f, sp=sp, t=t, p=p) for a, wa, f, sp, t, p in itertools.product(
    (1 / 50, 1 / 40, 1 / 30), (1.5, 2, 2.5), (32, 64, 128), (50, 100, 200), (0, 24000), (0, 1))]
LINE = 128


def tile(name):
    m = re.search(r"_(\d+)x(\d+)x\d+_", name)
    return int(m.group(1)), int(m.group(2))


def straddles(name, m, n, k):
    """Whether A's rows, and B's, are not whole lines apart, as `tune` stores them (rows of
    the stored width: A M x K unless the layout's first letter is t, B K x N unless its
    second is)."""
    lay = re.search(r"_(nn|nt|tn|tt)_", name)
    lay = lay.group(1) if lay else "nn"
    elem = 2  # the model ranks only the wgmma members, whose inputs are bf16 or f16
    a = (m if lay[0] == "t" else k) * elem
    b = (k if lay[1] == "t" else n) * elem
    return a % LINE != 0, b % LINE != 0


def split(name):
    m = re.search(r"_split(\d+)", name)
    return int(m.group(1)) if m else 1


maps = lambda name: "_wgmma" in name


def old_order(m, n, k, part):
    count = lambda t: math.ceil(m / t[0]) * math.ceil(n / t[1])
    area = lambda t: t[0] * t[1]
    fill = [x for x in part if count(tile(x)) >= SMS]
    rest = [x for x in part if count(tile(x)) < SMS]
    return sorted(fill, key=lambda x: -area(tile(x))) + sorted(rest, key=lambda x: area(tile(x)))


def cost(m, n, k, name, P):
    """call_checks::wgmma_cost in floating point."""
    (tm, tn), s = tile(name), split(name)
    tiles = math.ceil(m / tm) * math.ceil(n / tn)
    rounds = math.ceil(tiles / max(SMS // s, 1))
    sa, sb = straddles(name, m, n, k)
    unit = math.ceil(k / s) * (P["a"] * tm * tn + P["wa"] * tm * (1 + P["p"] * sa)
                               + tn * (1 + P["p"] * sb) + P["f"])
    return rounds * (unit + P["t"] + (P["sp"] * tm * tn if s > 1 else 0))


def model_order(P):
    return lambda m, n, k, part: sorted(part, key=lambda x: cost(m, n, k, x, P))


def gemm_order(m, n, k, names, maps_order, table_only=()):
    """call_checks::gemm_order over members that all run (as on the H200 that tuned them),
    passing over those whose name contains one of `table_only` (`tuning: table_only`; none in
    the default library since 2026-12-05, when the 128x192 s4 tiles stopped being)."""
    usable = [x for x in names if not any(t in x for t in table_only)]
    swap = lambda x: maps(x) and tile(x)[0] < WGMMA_ROWS
    covers = lambda x: m <= tile(x)[0]
    decode = (m <= DECODE_ROWS and not any(swap(x) and covers(x) for x in usable)
              and any(not maps(x) and tile(x)[0] <= DECODE_ROWS for x in usable))
    out = []
    for part_maps in ([False, True] if decode else [True, False]):
        part = [x for x in usable if maps(x) == part_maps]
        ordered = (maps_order if part_maps else old_order)(m, n, k, part)
        covering = [x for x in ordered if not swap(x) or covers(x)]
        out += [x for x in covering if swap(x)] + [x for x in covering if not swap(x)]
        out += [x for x in ordered if swap(x) and not covers(x)]
    return out


def lines(paths):
    for p in paths:
        if p.endswith(".tar.xz"):
            with tarfile.open(p) as t:
                for member in t.getmembers():
                    if member.isfile() and member.name.endswith(".jsonl"):
                        yield from io.TextIOWrapper(t.extractfile(member))
        else:
            yield from open(p)


def load(paths):
    newest = {}
    for line in lines(paths):
        d = json.loads(line)
        r = d.get("result") if d.get("event") == "tuned" else None
        if not r or not r["method"].startswith("gemm"):
            continue
        key = (r["method"], tuple(r["shape"]))
        if key not in newest or len(r["times"]) >= len(newest[key]["times"]):
            newest[key] = r
    # Listed order: the order of ties is the group's, which these lines do not keep; sort by
    # name so that the result does not lean on the measured order.
    return [dict(method=r["method"], shape=tuple(r["shape"]), times=dict(sorted(r["times"])))
            for r in newest.values()]


def judge(recs, order):
    out = []
    for r in recs:
        m, n, k = r["shape"]
        pick = gemm_order(m, n, k, list(r["times"]), order)[0]
        out.append((r["times"][pick] / min(r["times"].values()), r, pick))
    return out


def summary(label, res):
    g = statistics.geometric_mean
    v = [x[0] for x in res]
    print(f"{label}: {len(v)} method-shapes, geometric mean {g(v):.3f}, worst {max(v):.2f}")
    for lo, hi in ((1, 16), (17, 64), (65, 256), (257, 1024), (1025, 1 << 31)):
        part = [x[0] for x in res if lo <= x[1]["shape"][0] <= hi]
        if part:
            print(f"  M {lo}-{hi if hi < 1 << 31 else 'up'}: {len(part)}, {g(part):.3f}, worst {max(part):.2f}")


def main(paths):
    recs = load(paths)
    summary("tile_order (before)", judge(recs, old_order))
    res = judge(recs, model_order(MODEL))
    summary(f"cost model {MODEL}", res)
    print("worst ten with the cost model:")
    for ratio, r, pick in sorted(res, key=lambda x: -x[0])[:10]:
        best = min(r["times"], key=r["times"].get)
        print(f"  {ratio:.2f} {r['method']:34s} {'x'.join(map(str, r['shape'])):16s} {pick} (fastest {best})")
    # Refit on half the shapes, judge on the other half.
    scored = [(P, judge(recs, model_order(P))) for P in GRID]
    shapes = sorted({r["shape"] for r in recs})
    g = statistics.geometric_mean
    for seed in range(4):
        random.Random(seed).shuffle(shapes)
        half = set(shapes[: len(shapes) // 2])
        on = lambda res, inside: g([x[0] for x in res if (x[1]["shape"] in half) == inside])
        P, res = min(scored, key=lambda s: on(s[1], True))
        print(f"fit on half {seed}: {P} fitted {on(res, True):.3f}, other half {on(res, False):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
