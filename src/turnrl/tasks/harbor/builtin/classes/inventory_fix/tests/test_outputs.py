"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import inventory


class TestOutputs(unittest.TestCase):
    def test_remove_all(self):
        inv = inventory.Inventory()
        inv.add("bolt", 2)
        inv.remove("bolt", 2)
        self.assertEqual(inv.items(), [])
        self.assertEqual(inv.quantity("bolt"), 0)

    def test_too_many(self):
        inv = inventory.Inventory()
        inv.add("nut", 1)
        with self.assertRaises(ValueError):
            inv.remove("nut", 3)
        self.assertEqual(inv.quantity("nut"), 1)

    def test_unknown(self):
        with self.assertRaises(KeyError):
            inventory.Inventory().remove("gear", 1)


if __name__ == "__main__":
    unittest.main()
