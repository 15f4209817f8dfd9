"""Two processes on one GPU taking turns, one block of steps each, so that both meet the
same machine: capture.py --turns, started in pairs by step_time_turns.py, over pipes; the
ranks of two torchrun jobs (multi_gpu_train.py, started by multi_gpu_matrix.py --turns)
over FIFOs, rank by rank."""
import os
import signal


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


ROLES = ("baseline", "candidate")  # the baseline takes the first turn


class _OpenTimedOut(Exception):
    pass


def fifo_turns(spec, rank, open_timeout_s=180):
    """Turns for processes that cannot inherit pipes (torchrun's launcher closes them):
    spec "FOLDER,ROLE,N" names a folder where rank `rank` of each side reads the FIFO
    named after its own role and writes the other's. Rank r of one job takes turns with
    rank r of the other, on the same GPU. Returns (Turns, takes_first_turn)."""
    try:
        folder, role, n = spec.split(",")
    except ValueError:
        raise ValueError(f"turns spec wants FOLDER,ROLE,N, not {spec!r}") from None
    if role not in ROLES:
        raise ValueError(f"turns spec: role must be one of {ROLES}, not {role!r}")
    other = ROLES[1 - ROLES.index(role)]
    paths = {r: os.path.join(folder, f"rank{rank}.{r}") for r in ROLES}
    for path in paths.values():
        try:
            os.mkfifo(path)
        except FileExistsError:
            pass
    # Opening a FIFO waits for its other end. The baseline opens its write end first and
    # the candidate its read end first, so the two meet; a partner that never comes (it
    # died before) ends the wait with an error instead of a hang.
    def give_up(*_):
        raise _OpenTimedOut()
    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(open_timeout_s)
    try:
        if role == "baseline":
            w = os.open(paths[other], os.O_WRONLY)
            r = os.open(paths[role], os.O_RDONLY)
        else:
            r = os.open(paths[role], os.O_RDONLY)
            w = os.open(paths[other], os.O_WRONLY)
    except _OpenTimedOut:
        raise TimeoutError(f"rank {rank}'s partner ({other}) did not open its turns FIFO "
                           f"in {open_timeout_s} s") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return Turns(f"{r},{w},{n}"), role == "baseline"
