import unittest

import workdays


class TestWorkdays(unittest.TestCase):
    def test_within_week(self):
        self.assertEqual(workdays.add_business_days("2024-06-03", 2), "2024-06-05")


if __name__ == "__main__":
    unittest.main()
