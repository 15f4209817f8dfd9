"""Two processes on one GPU taking turns, one block of steps each (capture.py --turns,
started in pairs by step_time_turns.py), so that both meet the same machine."""
import os


class Turns:
    """spec "R,W,N": wait for a byte on file descriptor R before each block of N steps,
    write one to W after it. When R reaches its end (the other process exited) or W is
    broken, the rest runs alone, from step `alone_from`."""

    def __init__(self, spec):
        try:
            r, w, n = (int(x) for x in spec.split(","))
        except ValueError:
            raise ValueError(f"--turns wants R,W,N (three integers), not {spec!r}") from None
        if n < 1:
            raise ValueError(f"--turns: N must be at least 1, not {n}")
        self.read_fd, self.write_fd, self.steps = r, w, n
        self.alone_from = None

    def wait(self, step):
        if self.alone_from is None and not os.read(self.read_fd, 1):
            self.alone_from = step

    def pass_and_wait(self, step):
        """After a block that ended at `step`: the other process's turn, then ours."""
        if self.alone_from is None:
            try:
                os.write(self.write_fd, b"t")
            except BrokenPipeError:
                self.alone_from = step
                return
            self.wait(step)
