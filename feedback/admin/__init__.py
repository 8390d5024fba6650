"""Admin screens of the feedback app, one module per concept; importing them registers them."""

from feedback.admin import archive, mistakes, reviews

__all__ = ["archive", "mistakes", "reviews"]
