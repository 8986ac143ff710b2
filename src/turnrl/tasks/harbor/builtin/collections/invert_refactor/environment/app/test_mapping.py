import unittest

import mapping


class TestMapping(unittest.TestCase):
    def test_invert(self):
        self.assertEqual(mapping.inv({"a": 1, "b": 2, "c": 1}), {1: ["a", "c"], 2: ["b"]})


if __name__ == "__main__":
    unittest.main()
