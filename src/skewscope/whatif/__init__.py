"""What-if: replay the evidence under other routing policies (``skewscope whatif``)."""
