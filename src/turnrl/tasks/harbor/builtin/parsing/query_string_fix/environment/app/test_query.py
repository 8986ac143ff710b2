import unittest

import query


class TestQuery(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(query.parse_query("a=1&b=2"), {"a": ["1"], "b": ["2"]})


if __name__ == "__main__":
    unittest.main()
