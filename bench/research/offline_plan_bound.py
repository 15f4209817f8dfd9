"""How small a device a trace could run on if every block's lifetime were known ahead:
packs the trace's blocks into one address range with TFLite's greedy-by-size memory
planner (largest block first, each at the lowest offset free for its whole lifetime) and
prints the range's size against the peak live bytes, in 2 MiB pages. An allocator that
serves a training step from a plan made of an earlier, identical step can come near it;
online policies cannot see lifetimes (docs/allocator.md, Open: resnet50's smallest device).

usage: offline_plan_bound.py TRACE.trace.tsv.gz [--check]
  TRACE: a trace as tests/data's *.trace.tsv.gz (seq, action, addr, size, ...); blocks
  live from `alloc` to `free_completed` (to the end if never freed), sizes rounded up to
  512 bytes as PyTorch's allocator rounds them.
  --check: verify that no two blocks alive at once overlap in the plan (slow: all pairs)
"""
import argparse
import gzip
import sys

PAGE = 2 << 20
MiB = 1 << 20


def trace_rows(path):
    """(event index, action, addr, size) for each event line of a *.trace.tsv.gz."""
    t = 0
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) < 4:
                continue
            try:
                action, addr, size = fields[1], int(fields[2]), int(fields[3])
            except ValueError:
                raise SystemExit(f"{path}: line {t + 1}: not seq, action, addr, size: {line!r}")
            yield t, action, addr, size
            t += 1


def read_lifetimes(path):
    """[(size, start, end)] in event order, and the peak live bytes."""
    live, blocks = {}, []
    t = cur = peak = 0
    for t, action, addr, size in trace_rows(path):
        if action == "alloc":
            size = (size + 511) // 512 * 512
            live[addr] = (t, size)
            cur += size
            peak = max(peak, cur)
        elif action == "free_completed" and addr in live:
            start, size = live.pop(addr)
            blocks.append((size, start, t))
            cur -= size
    end = t + 1 if blocks or live else 0
    blocks.extend((size, start, end) for start, size in live.values())
    return blocks, peak


def lowest_free_offset(taken, size):
    """The lowest offset at which `size` bytes fit beside the (lo, hi) intervals `taken`,
    sorted by lo."""
    offset = 0
    for lo, hi in taken:
        if offset + size <= lo:
            break
        offset = max(offset, hi)
    return offset


def greedy_by_size(blocks):
    """[(offset, size, start, end)] and the range's size."""
    placed, top = [], 0
    for size, start, end in sorted(blocks, key=lambda b: (-b[0], b[1])):
        offset = lowest_free_offset(
            sorted((o, o + z) for o, z, s, e in placed if s < end and start < e), size)
        placed.append((offset, size, start, end))
        top = max(top, offset + size)
    return placed, top


def overlaps(placed):
    for i, (o1, z1, s1, e1) in enumerate(placed):
        for o2, z2, s2, e2 in placed[i + 1:]:
            if s1 < e2 and s2 < e1 and o1 < o2 + z2 and o2 < o1 + z1:
                return (o1, z1, s1, e1), (o2, z2, s2, e2)
    return None


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    try:
        blocks, peak = read_lifetimes(args.trace)
    except (OSError, EOFError) as e:
        raise SystemExit(f"{args.trace}: {e}")
    placed, top = greedy_by_size(blocks)
    print(f"{args.trace}: {len(blocks)} blocks; peak live {peak / MiB:.1f} MiB = "
          f"{peak / PAGE:.1f} pages; planned range {top / MiB:.1f} MiB = {top / PAGE:.1f} "
          f"pages ({top / peak:.4f} x peak)" if peak else f"{args.trace}: no blocks")
    if args.check:
        bad = overlaps(placed)
        if bad:
            print(f"plan invalid: {bad[0]} overlaps {bad[1]}")
            return 1
        print("plan checked: no two live blocks overlap")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
