"""The Python package's reading of gpumem's text functions (snprintf rules): the whole
text comes back even when it grows between one call and the next, as a snapshot's
figures do while other threads allocate, and when it is longer than the first buffer.

usage: package_text_test.py PYTHON_DIR. Exits non-zero on failure.
"""
import ctypes
import json
import sys
import unittest

sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else "python")
sys.modules["torch"] = None  # the package imports without torch
from gpumem import _native  # noqa: E402
del sys.modules["torch"]


class GrowingText:
    """A text function whose JSON figure gains digits at every call, like a counter that
    other threads move between the call that sizes the buffer and the one that fills it."""

    def __init__(self, padding=0):
        self.calls = 0
        self.padding = padding

    def __call__(self, device, buf, size):
        self.calls += 1
        text = json.dumps({"device": device, "allocs": 10 ** (self.calls * 3),
                           "pad": "x" * self.padding}).encode()
        if buf is not None and size > 0:
            n = min(size - 1, len(text))
            ctypes.memmove(buf, text, n)
            buf[n] = b"\0"
        return len(text) + 1


class Text(unittest.TestCase):
    def test_a_text_that_grows_between_calls_comes_back_whole(self):
        fn = GrowingText()
        got = json.loads(_native.text(fn, 1, size=16))  # too small: asked again
        self.assertEqual(got["device"], 1)
        self.assertGreater(fn.calls, 1)

    def test_longer_than_the_first_buffer(self):
        fn = GrowingText(padding=10000)
        self.assertEqual(len(json.loads(_native.text(fn, 0))["pad"]), 10000)

    def test_a_short_text_takes_one_call(self):
        fn = GrowingText()
        self.assertEqual(json.loads(_native.text(fn, 0))["allocs"], 1000)
        self.assertEqual(fn.calls, 1)


if __name__ == "__main__":
    unittest.main()
