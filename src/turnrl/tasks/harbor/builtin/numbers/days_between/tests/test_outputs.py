"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import dates


class TestOutputs(unittest.TestCase):
    def test_order(self):
        self.assertEqual(dates.days_between("2024-03-01", "2024-02-01"), 29)

    def test_years(self):
        self.assertEqual(dates.days_between("1999-12-31", "2000-12-31"), 366)
        self.assertEqual(dates.days_between("2020-05-05", "2020-05-05"), 0)

    def test_bad(self):
        with self.assertRaises(ValueError):
            dates.days_between("2024-13-01", "2024-01-01")


if __name__ == "__main__":
    unittest.main()
