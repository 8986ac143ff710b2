import unittest

import report


class TestReport(unittest.TestCase):
    def test_summary(self):
        self.assertEqual(report.summary(1, 1, 2), "passed 25.0%, failed 25.0%, skipped 50.0%")


if __name__ == "__main__":
    unittest.main()
