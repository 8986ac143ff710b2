import unittest

import flags


class TestFlags(unittest.TestCase):
    def test_words(self):
        self.assertTrue(flags.parse_bool("yes"))
        self.assertFalse(flags.parse_bool("off"))


if __name__ == "__main__":
    unittest.main()
