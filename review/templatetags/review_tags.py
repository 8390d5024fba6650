"""Template helpers of the review inbox: readable values and the admin index's waiting counts."""

from django import template

from review import selectors

register = template.Library()


@register.filter
def readable(value):
    """A value for a table cell: floats rounded to three places, lists joined, nested objects as key: value."""
    if isinstance(value, bool) or value is None:
        return "–" if value is None else ("yes" if value else "no")
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    if isinstance(value, list):
        return ", ".join(str(readable(v)) for v in value) or "–"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {readable(v)}" for k, v in value.items()) or "–"
    return value


@register.simple_tag(takes_context=True)
def review_waiting(context):
    """[(kind, label, count)] of what waits for the signed-in reviewer, and the total."""
    user = context["request"].user
    counts = selectors.waiting_counts(user=user)
    rows = [(spec.kind, spec.label, counts[spec.kind]) for spec in selectors.kinds_visible(user)]
    return {"rows": rows, "total": sum(counts.values())}
