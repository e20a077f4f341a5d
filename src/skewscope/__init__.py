"""skewscope: find and explain load skew across LLM inference instances and DP ranks."""

__version__ = "0.1.0"
