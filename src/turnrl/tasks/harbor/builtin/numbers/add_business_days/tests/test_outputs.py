"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import workdays


class TestOutputs(unittest.TestCase):
    def test_over_weekend(self):
        self.assertEqual(workdays.add_business_days("2024-06-07", 1), "2024-06-10")
        self.assertEqual(workdays.add_business_days("2024-06-06", 5), "2024-06-13")

    def test_zero(self):
        self.assertEqual(workdays.add_business_days("2024-06-08", 0), "2024-06-10")
        self.assertEqual(workdays.add_business_days("2024-06-05", 0), "2024-06-05")

    def test_from_weekend(self):
        self.assertEqual(workdays.add_business_days("2024-06-09", 1), "2024-06-11")


if __name__ == "__main__":
    unittest.main()
