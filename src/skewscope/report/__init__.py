"""The Report model and its renderers (terminal, Markdown, JSON)."""
