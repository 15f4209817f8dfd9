"""What the case files of diagnosis_matrix.py share (diagnosis_cases.py,
hidden_oom_cases.py): cases registered with the verdict expected in each mode, the line
marked `# LEAK` in each, and the command line: `CASE` runs one, `list` prints, a line a
case: name, the verdict under profile-only, under gpumem's allocator ("completes": the run
ends normally; spaces as _), and the `# LEAK` line (0: none)."""
import inspect
import sys


class Cases:
    def __init__(self):
        self.by_name = {}

    def case(self, profile, gpumem=None, leak_in=None):
        """A case expecting `profile` under profile-only mode and `gpumem` (default the
        same) under gpumem's allocator; its `# LEAK` line is in `leak_in` (a class or
        function of the same file) where not in the case itself."""
        def register(fn):
            fn.expected = {"profile": profile, "gpumem": gpumem or profile}
            fn.leak_in = leak_in or fn
            self.by_name[fn.__name__] = fn
            return fn
        return register

    def leak_line(self, name):
        lines, first = inspect.getsourcelines(self.by_name[name].leak_in)
        return next((first + i for i, line in enumerate(lines) if "# LEAK" in line), 0)

    def main(self, before_run=None):
        name = sys.argv[1]
        if name == "list":
            for n, fn in self.by_name.items():
                e = fn.expected
                print(n, e["profile"].replace(" ", "_"), e["gpumem"].replace(" ", "_"),
                      self.leak_line(n))
            return
        if before_run:
            before_run()
        self.by_name[name]()
