"""The Dash UI."""
