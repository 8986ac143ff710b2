class Inventory:
    def __init__(self) -> None:
        self._stock: dict[str, int] = {}

    def add(self, item: str, qty: int) -> None:
        self._stock[item] = self._stock.get(item, 0) + qty

    def remove(self, item: str, qty: int) -> None:
        self._stock[item] -= qty

    def quantity(self, item: str) -> int:
        return self._stock.get(item, 0)

    def items(self) -> list[str]:
        return sorted(self._stock)
