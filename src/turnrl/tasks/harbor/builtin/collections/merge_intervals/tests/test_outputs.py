"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import intervals


class TestOutputs(unittest.TestCase):
    def test_unsorted(self):
        self.assertEqual(intervals.merge([(8, 10), (1, 3), (2, 6)]), [(1, 6), (8, 10)])

    def test_touching(self):
        self.assertEqual(intervals.merge([(3, 5), (1, 3)]), [(1, 5)])

    def test_contained(self):
        self.assertEqual(intervals.merge([(1, 10), (2, 3)]), [(1, 10)])
        self.assertEqual(intervals.merge([]), [])


if __name__ == "__main__":
    unittest.main()
