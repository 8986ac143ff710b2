"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import report


class TestOutputs(unittest.TestCase):
    def test_percent(self):
        self.assertEqual(report.percent(1, 3), 33.3)
        self.assertEqual(report.percent(1, 3, digits=3), 33.333)
        self.assertEqual(report.percent(5, 0), 0.0)

    def test_summary_kept(self):
        self.assertEqual(report.summary(2, 1, 0), "passed 66.7%, failed 33.3%, skipped 0.0%")
        self.assertEqual(report.summary(0, 0, 0), "passed 0.0%, failed 0.0%, skipped 0.0%")

    def test_uses_percent(self):
        import inspect

        source = inspect.getsource(report.summary)
        self.assertEqual(source.count("percent("), 3)
        self.assertNotIn("round(", source)


if __name__ == "__main__":
    unittest.main()
