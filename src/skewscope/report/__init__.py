"""The report models (diagnose, compare, what-if, backtest), their words and their renderers."""
