import unittest

import bank


class TestBank(unittest.TestCase):
    def test_withdraw(self):
        acct = bank.Account("ann", 10)
        acct.withdraw(4)
        self.assertEqual(acct.balance, 6)


if __name__ == "__main__":
    unittest.main()
