"""Contestants timed turn about on the current CUDA stream: shared by bench/peers/attention.py
and bench/flash-attn/run.py.

Everything is queued before one wait (a wait per sample would start each from an idle queue and
count the host's time to issue the first call, far longer for SDPA than for a bare launch), each
call between its own pair of events, the contestants in a new shuffled order every round (a
fixed rotation always puts the same one after the same peer), and call n, counted across the
turn, runs copy n % copies of its contestant: with every contestant on the same number (two or
more) of input copies, no call reads the copy the call before it read, so none finds in L2 what
the call before it left there (bench/flash-attn/NOTES.md, rounds 14 and 15).
"""
import random
import statistics

import torch


def time_turns(runs, rounds, calls, warmup=1, seed=11):
    """Median ms per call of each contestant. `runs` maps a name to one callable per input copy;
    every callable runs `warmup` times first, then `rounds` rounds of `calls` calls each."""
    for copies in runs.values():
        for run in copies:
            for _ in range(warmup):
                run()
    torch.cuda.synchronize()
    names = list(runs)
    events = {n: [] for n in names}
    order = random.Random(seed)
    n_call = 0
    for _ in range(rounds):
        order.shuffle(names)
        for n in names:
            for _ in range(calls):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                runs[n][n_call % len(runs[n])]()
                b.record()
                events[n].append((a, b))
                n_call += 1
    torch.cuda.synchronize()
    return {n: statistics.median(a.elapsed_time(b) for a, b in ev) for n, ev in events.items()}
