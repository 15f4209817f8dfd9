"""How small a device one steady training step could run on if its short-lived blocks were
planned around the long-lived ones where an online policy left them: the bound for a
step planner that works inside the policy's own pages (docs/allocator.md, Open).

The step is found from the trace: the period of its allocation sizes, starting where the
live bytes are lowest, the second-to-last whole period. Blocks that live a step or more
(weights, optimizer state, leaks) are obstacles at the policy's addresses, live through the
whole step; the pages they
touch are laid side by side (an optimistic join of pages that may lie in different ranges).
Every other block allocated in the step lives less than two steps (lifetimes wrap around
the step's end; one of more than a step is two overlapping instances) and is packed greedy
by size, each at the lowest
offset free of obstacles and of the blocks it lives with. Prints the pages that takes
against the pages of the obstacles and the step's peak live bytes.

usage: obstacle_plan_bound.py TRACE.trace.tsv.gz ADDRESSES
  ADDRESSES: `gpumem replay --policy P --addresses ADDRESSES TRACE.trace.tsv.gz` (add
  --cap to study the layout of a capped device, e.g. the smallest one that completes)
"""
import argparse
import sys

from offline_plan_bound import PAGE, lowest_free_offset, trace_rows


def read_blocks(trace_path, addresses_path):
    """[(size, start, end, policy_addr)] in allocation order and the allocations' event
    times; sizes rounded up to 512 bytes, `end` the trace's length if never freed."""
    placed = []
    with open(addresses_path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            _, trace_addr, addr, size = (int(x) for x in line.split("\t"))
            placed.append((trace_addr, addr, size))
    live, blocks, alloc_times = {}, [], []
    t = -1
    for t, action, addr, size in trace_rows(trace_path):
        if action == "alloc":
            k = len(blocks)
            if k >= len(placed) or placed[k][0] != addr or placed[k][2] != size:
                raise SystemExit(f"{addresses_path}: allocation {k} does not match the "
                                 f"trace's (event {t}: {addr} {size})")
            live[addr] = k
            blocks.append([(size + 511) // 512 * 512, t, None, placed[k][1]])
            alloc_times.append(t)
        elif action == "free_completed" and addr in live:
            blocks[live.pop(addr)][2] = t
    t += 1
    for b in blocks:
        if b[2] is None:
            b[2] = t
    return [tuple(b) for b in blocks], alloc_times


def steady_step(blocks, alloc_times):
    """(start, end) event times of the trace's second-to-last whole step, or None."""
    sizes = [b[0] for b in blocks]
    n = len(sizes)
    period = None
    for p in range(2, n // 3 + 1):
        if all(sizes[i] == sizes[i + p] for i in range(n // 2, n - p)):
            period = p
            break
    if period is None or n < 3 * period:
        return None
    # Live bytes just before each allocation of the last whole period: the step starts
    # where they are lowest.
    events = sorted([(s, z) for z, s, e, _ in blocks] + [(e, -z) for z, s, e, _ in blocks])
    live_before, cur = {}, 0
    wanted = set(alloc_times[n - 2 * period:n - period])
    for time, delta in events:
        if time in wanted and time not in live_before:
            live_before[time] = cur
        cur += delta
    first = n - 2 * period
    start = min(range(first, first + period), key=lambda i: live_before[alloc_times[i]])
    return alloc_times[start], alloc_times[start + period]


def pack_around(blocks, t0, t1):
    """(pages needed, obstacle pages, obstacle count, planned count, step's peak live)."""
    length = t1 - t0
    # Long-lived: alive through the whole step, or made in it to live two steps or more
    # (then counted as live through all of it: conservative).
    obstacles = [b for b in blocks if (b[1] < t0 and b[2] >= t1) or
                 (t0 <= b[1] < t1 and b[2] - b[1] >= 2 * length)]
    pages = sorted({p for z, s, e, a in obstacles for p in range(a // PAGE, (a + z - 1) // PAGE + 1)})
    index = {p: i for i, p in enumerate(pages)}
    fixed = [(index[a // PAGE] * PAGE + a % PAGE, index[a // PAGE] * PAGE + a % PAGE + z)
             for z, s, e, a in obstacles]

    def pieces(s, e):
        return [(s, e)] if e <= length else [(s, length), (0, e - length)]

    # Made in the step: a lifetime under a step is one circular interval; one of a step or
    # more (under two) means two instances overlap for part of each step: one always live,
    # one for the overlap (a planner alternates their two places). Blocks made before the
    # step and freed in it are the previous instances of these.
    planned = []
    for z, s, e, a in blocks:
        if t0 <= s < t1 and e - s < length:
            planned.append((z, pieces(s - t0, e - t0)))
        elif t0 <= s < t1 and e - s < 2 * length:
            planned.append((z, [(0, length)]))
            if e - s > length:
                planned.append((z, pieces(s - t0, e - t0 - length)))
    placed, top = [], len(pages) * PAGE
    for z, pc in sorted(planned, key=lambda b: -b[0]):
        taken = fixed + [(o, o + zz) for o, zz, other in placed
                         if any(a0 < b1 and b0 < a1 for a0, a1 in pc for b0, b1 in other)]
        offset = lowest_free_offset(sorted(taken), z)
        placed.append((offset, z, pc))
        top = max(top, offset + z)
    # The step's peak live bytes: obstacles (as if always live) plus the planned blocks
    # alive at once.
    points = sorted({p for _, pc in planned for lo, hi in pc for p in (lo, hi - 1)})
    base = sum(z for z, s, e, a in obstacles)
    peak = base + max((sum(z for z, pc in planned if any(lo <= p < hi for lo, hi in pc))
                       for p in points), default=0)
    return top / PAGE, len(pages), len(obstacles), len(planned), peak


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("addresses")
    args = p.parse_args(argv)
    try:
        blocks, alloc_times = read_blocks(args.trace, args.addresses)
    except (OSError, EOFError, ValueError) as e:
        raise SystemExit(f"{args.trace}, {args.addresses}: {e}")
    step = steady_step(blocks, alloc_times)
    if step is None:
        print(f"{args.trace}: no repeating step found")
        return 1
    need, obstacle_pages, obstacles, planned, peak = pack_around(blocks, *step)
    print(f"{args.trace}: steady step at events {step[0]}-{step[1]}: {obstacles} long-lived "
          f"blocks on {obstacle_pages} pages, {planned} planned around them; "
          f"{need:.1f} pages needed (step's peak live {peak / PAGE:.1f} pages)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
