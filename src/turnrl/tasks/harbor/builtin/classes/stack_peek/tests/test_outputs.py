"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import stack


class TestOutputs(unittest.TestCase):
    def test_peek_keeps(self):
        s = stack.Stack()
        s.push("x")
        self.assertEqual(s.peek(), "x")
        self.assertEqual(len(s), 1)

    def test_empty(self):
        s = stack.Stack()
        with self.assertRaisesRegex(IndexError, "empty stack"):
            s.pop()
        with self.assertRaisesRegex(IndexError, "empty stack"):
            s.peek()


if __name__ == "__main__":
    unittest.main()
