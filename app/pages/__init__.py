"""Dash pages, one module per page."""
