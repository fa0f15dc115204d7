"""The faces: CLI, renderers (terminal, JSON, Markdown) and, later, the Slack app."""
