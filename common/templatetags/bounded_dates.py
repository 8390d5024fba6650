"""The admin's date drill-down without a scan of the table: Django's ``date_hierarchy`` lists the years, months or
days that hold rows with a DISTINCT over every row of the list (every row of a year, or of the table). Here the
candidates are the buckets between the list's first and last date (two probes of the date's index), and one
statement asks each bucket for a single row: the cost follows the number of buckets, not of rows."""

import datetime

from django import template
from django.conf import settings
from django.contrib.admin.templatetags.admin_list import date_hierarchy
from django.contrib.admin.templatetags.base import InclusionAdminNode
from django.contrib.admin.utils import get_fields_from_path
from django.db import models
from django.db.models import Value
from django.utils import timezone

register = template.Library()

MAX_BUCKETS = 400  # buckets probed in one statement (years between the first and last row); beyond, Django's query


def _next(start: datetime.date, kind: str) -> datetime.date | None:
    """The next bucket's first day; None past the calendar's last (9999-12-31)."""
    try:
        if kind == "year":
            return start.replace(year=start.year + 1)
        if kind == "month":
            return (start.replace(day=28) + datetime.timedelta(days=4)).replace(day=1)
        return start + datetime.timedelta(days=1)
    except (ValueError, OverflowError):
        return None


def _truncate(day: datetime.date, kind: str) -> datetime.date:
    if kind == "year":
        return day.replace(month=1, day=1)
    if kind == "month":
        return day.replace(day=1)
    return day


class _ProbedDates:
    """Stands in for the change list's queryset in Django's ``date_hierarchy``: ``dates``/``datetimes`` answer the
    buckets that hold a row by probing, everything else is the queryset's."""

    def __init__(self, queryset):
        self.queryset = queryset

    def __getattr__(self, name):
        return getattr(self.queryset, name)

    def datetimes(self, field_name, kind, *args, **kwargs):
        return self._buckets(field_name, kind, aware=True)

    def dates(self, field_name, kind, *args, **kwargs):
        return self._buckets(field_name, kind, aware=False)

    def _buckets(self, field_name, kind, *, aware):
        queryset = self.queryset.order_by()
        span = queryset.aggregate(first=models.Min(field_name), last=models.Max(field_name))
        if span["first"] is None:
            return []
        first, last = span["first"], span["last"]
        if aware:
            first, last = (timezone.localtime(v) if timezone.is_aware(v) else v for v in (first, last))
            first, last = first.date(), last.date()
        starts = [_truncate(first, kind)]
        while (following := _next(starts[-1], kind)) is not None and following <= last:
            if len(starts) == MAX_BUCKETS:  # rows over more years than are worth probing: Django's own query
                getter = self.queryset.datetimes if aware else self.queryset.dates
                return list(getter(field_name, kind))
            starts.append(following)

        def bound(day):
            if not aware:
                return day
            start = datetime.datetime.combine(day, datetime.time.min)
            return timezone.make_aware(start) if settings.USE_TZ else start

        def within(start):
            following = _next(start, kind)
            limits = {f"{field_name}__gte": bound(start)}
            if following is not None:  # the calendar's last bucket has no end
                limits[f"{field_name}__lt"] = bound(following)
            return limits

        parts = [
            queryset.filter(**within(start)).annotate(bucket=Value(i)).values_list("bucket", flat=True)[:1]
            for i, start in enumerate(starts)
        ]
        held = set(parts[0].union(*parts[1:], all=True).order_by()) if len(parts) > 1 else set(parts[0])
        return [bound(start) for i, start in enumerate(starts) if i in held]


class _ProbedChangeList:
    def __init__(self, cl):
        self.cl = cl
        self.queryset = _ProbedDates(cl.queryset)

    def __getattr__(self, name):
        return getattr(self.cl, name)


def bounded_date_hierarchy(cl):
    """Django's ``date_hierarchy`` over probed buckets (same links, same template)."""
    field = get_fields_from_path(cl.model, cl.date_hierarchy)[-1]
    if not isinstance(field, models.DateField):
        return date_hierarchy(cl)
    return date_hierarchy(_ProbedChangeList(cl))


@register.tag(name="bounded_date_hierarchy")
def bounded_date_hierarchy_tag(parser, token):
    return InclusionAdminNode(
        "date_hierarchy", parser, token, func=bounded_date_hierarchy, template_name="date_hierarchy.html", takes_context=False
    )
