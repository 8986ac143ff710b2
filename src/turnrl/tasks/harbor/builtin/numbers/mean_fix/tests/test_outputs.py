"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import stats


class TestOutputs(unittest.TestCase):
    def test_fraction(self):
        self.assertEqual(stats.mean([1, 2]), 1.5)
        self.assertAlmostEqual(stats.mean([0.1, 0.2, 0.3]), 0.2)

    def test_empty(self):
        with self.assertRaisesRegex(ValueError, "mean of no values"):
            stats.mean([])


if __name__ == "__main__":
    unittest.main()
