"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import cleaning


class TestOutputs(unittest.TestCase):
    def test_normalize_space(self):
        self.assertEqual(cleaning.normalize_space("  a\t b\n\nc  "), "a b c")
        self.assertEqual(cleaning.normalize_space(""), "")

    def test_behaviour_kept(self):
        self.assertEqual(cleaning.clean_name("  ada   lovelace "), "Ada Lovelace")
        self.assertEqual(cleaning.clean_sentence("  done. "), "Done.")
        self.assertEqual(cleaning.clean_sentence("   "), "")

    def test_uses_helper(self):
        import inspect

        for fn in (cleaning.clean_name, cleaning.clean_sentence):
            source = inspect.getsource(fn)
            self.assertIn("normalize_space(", source)
            self.assertNotIn(".split()", source)


if __name__ == "__main__":
    unittest.main()
