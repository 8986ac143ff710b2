import unittest

import inventory


class TestInventory(unittest.TestCase):
    def test_remove_some(self):
        inv = inventory.Inventory()
        inv.add("nut", 5)
        inv.remove("nut", 2)
        self.assertEqual(inv.quantity("nut"), 3)


if __name__ == "__main__":
    unittest.main()
