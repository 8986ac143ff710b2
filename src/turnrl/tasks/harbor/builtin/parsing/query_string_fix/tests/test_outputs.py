"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import query


class TestOutputs(unittest.TestCase):
    def test_repeated(self):
        self.assertEqual(query.parse_query("a=1&b=2&a=3"), {"a": ["1", "3"], "b": ["2"]})

    def test_decoding(self):
        self.assertEqual(query.parse_query("q=hello+world&x=%41%2B"), {"q": ["hello world"], "x": ["A+"]})

    def test_blank(self):
        self.assertEqual(query.parse_query("&flag&"), {"flag": [""]})


if __name__ == "__main__":
    unittest.main()
