"""The diagnosis method, steps 1-5, as pure functions over a UnitFrame."""
