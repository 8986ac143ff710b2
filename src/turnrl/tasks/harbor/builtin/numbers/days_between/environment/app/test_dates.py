import unittest

import dates


class TestDates(unittest.TestCase):
    def test_week(self):
        self.assertEqual(dates.days_between("2024-01-01", "2024-01-08"), 7)


if __name__ == "__main__":
    unittest.main()
