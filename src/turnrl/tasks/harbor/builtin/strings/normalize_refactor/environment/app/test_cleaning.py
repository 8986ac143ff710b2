import unittest

import cleaning


class TestCleaning(unittest.TestCase):
    def test_name(self):
        self.assertEqual(cleaning.clean_name("  ada   lovelace "), "Ada Lovelace")

    def test_sentence(self):
        self.assertEqual(cleaning.clean_sentence("hello   there"), "Hello there.")


if __name__ == "__main__":
    unittest.main()
