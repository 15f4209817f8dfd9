"""Writes a k-means-shaped allocation trace (.trace.tsv.gz) on which gpumem's layout needs
a larger device than PyTorch's expandable segments: each pass allocates a 195 MiB
distance matrix while the last one is still live, keeps an 800 KB block and replaces a
1.6 MB one. The kept blocks, each smaller than a page, land beside the large ones and
pin pages of their own (docs/results/allocator-history.md, medium blocks).

usage: medium_blocks_trace.py OUT.trace.tsv.gz [--passes N]
then:  gpumem replay --policy all --min-cap OUT.trace.tsv.gz
"""
import argparse
import gzip

DISTANCES = 200_000 * 256 * 4  # float32 distances of 200k points to 256 centroids
KEPT = 800_000                 # each pass's nearest distances, kept
INDICES = 1_600_000            # each pass's nearest indices (int64), replaced
SMALL = 65_536                 # centroid sums, new centroids


class Trace:
    def __init__(self, out):
        self.out, self.seq, self.time, self.next_addr = out, 0, 1000, 1 << 40
        out.write("# seq\taction\taddr\tsize\tstream\ttime_us\tstack\n")

    def event(self, action, addr, size):
        self.out.write(f"{self.seq}\t{action}\t{addr}\t{size}\t0\t{self.time}\t0\n")
        self.seq, self.time = self.seq + 1, self.time + 10

    def alloc(self, size):
        self.next_addr += 1 << 30  # the recorded addresses never overlap
        self.event("alloc", self.next_addr, size)
        return self.next_addr, size

    def free(self, block):
        self.event("free_requested", *block)
        self.event("free_completed", *block)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--passes", type=int, default=3000)
    args = ap.parse_args()
    with gzip.open(args.out, "wt") as f:
        t = Trace(f)
        t.alloc(200_000 * 64 * 4)  # the points
        centroids, distances, indices = t.alloc(SMALL), None, None
        for _ in range(args.passes):
            new = t.alloc(DISTANCES)  # the last pass's still live: Python rebinds after
            if distances:
                t.free(distances)
            distances = new
            t.alloc(KEPT)
            new = t.alloc(INDICES)
            if indices:
                t.free(indices)
            indices = new
            sums = t.alloc(SMALL)
            new = t.alloc(SMALL)
            t.free(sums)
            t.free(centroids)
            centroids = new


if __name__ == "__main__":
    main()
