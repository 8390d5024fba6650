"""Admin screens of the learning app, one module per concept; importing them registers them."""

from learning.admin import candidates, catalogue, decisions, disambiguation, imports

__all__ = ["candidates", "catalogue", "decisions", "disambiguation", "imports"]
