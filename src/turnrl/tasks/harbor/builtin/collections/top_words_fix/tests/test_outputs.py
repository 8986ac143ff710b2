"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import freq


class TestOutputs(unittest.TestCase):
    def test_most_first(self):
        words = ["b", "a", "c", "b", "a", "b"]
        self.assertEqual(freq.top_words(words, 2), [("b", 3), ("a", 2)])

    def test_ties(self):
        self.assertEqual(freq.top_words(["z", "y", "x", "y", "z"], 3), [("y", 2), ("z", 2), ("x", 1)])

    def test_k_large(self):
        self.assertEqual(freq.top_words(["q"], 5), [("q", 1)])


if __name__ == "__main__":
    unittest.main()
