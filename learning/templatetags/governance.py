"""Template tags for the admin index dashboard."""

from django import template

from learning.selectors import dashboard_counts

register = template.Library()


@register.simple_tag
def learning_dashboard():
    """Counts for reviewers: pending, approved this week, active learned phrases and blocks, top pending."""
    return dashboard_counts()
