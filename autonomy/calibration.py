"""Calibration arithmetic on bucket aggregates (the aggregation itself runs in the database)."""

from dataclasses import dataclass

GAP_EPSILON = 1e-9  # database averages of equal floats can differ in the last bit


@dataclass(frozen=True)
class BucketStat:
    low: float
    high: float
    count: int
    mean_confidence: float | None
    success_rate: float | None
    counted: bool

    @property
    def gap(self) -> float | None:
        """Stated minus actual: positive means overconfident."""
        if self.mean_confidence is None or self.success_rate is None:
            return None
        return self.mean_confidence - self.success_rate

    def as_dict(self) -> dict:
        gap = self.gap
        return {
            "low": self.low,
            "high": self.high,
            "count": self.count,
            "mean_confidence": _r(self.mean_confidence),
            "success_rate": _r(self.success_rate),
            "gap": _r(gap),
            "counted": self.counted,
        }


@dataclass(frozen=True)
class CalibrationSummary:
    buckets: list[BucketStat]
    sample_count: int
    total_samples: int
    mean_confidence: float | None
    mean_success: float | None
    ece: float | None
    overconfidence_rate: float
    underconfidence_rate: float
    raw_adjustment: float


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def build_buckets(edges: list[float], rows: dict[int, tuple[int, float, float]], min_samples: int) -> list[BucketStat]:
    """``rows`` maps bucket index (0-based, as ``width_bucket(conf, inner edges)`` gives) to (count, mean conf, success)."""
    out = []
    for i in range(len(edges) - 1):
        count, conf, succ = rows.get(i, (0, None, None))
        out.append(BucketStat(edges[i], edges[i + 1], int(count), conf, succ, counted=count >= min_samples))
    return out


def summarize(buckets: list[BucketStat], *, ece_threshold: float, max_adjustment: float) -> CalibrationSummary:
    """ECE = sum(n_b * |conf_b - success_b|) / sum(n_b) over buckets with enough samples.

    Over/under-confidence rates are the shares of counted samples that sit in
    buckets whose mean confidence is above/below their success rate. The raw
    adjustment is the sample-weighted mean of (success - confidence) when ECE
    exceeds the threshold (so overconfidence gives a negative number), capped.
    """
    total = sum(b.count for b in buckets)
    counted = [b for b in buckets if b.counted and b.count > 0]
    n = sum(b.count for b in counted)
    if n == 0:
        return CalibrationSummary(buckets, 0, total, None, None, None, 0.0, 0.0, 0.0)
    mean_conf = sum(b.count * b.mean_confidence for b in counted) / n
    mean_succ = sum(b.count * b.success_rate for b in counted) / n
    ece = sum(b.count * abs(b.gap) for b in counted) / n
    over = sum(b.count for b in counted if b.gap > GAP_EPSILON) / n
    under = sum(b.count for b in counted if b.gap < -GAP_EPSILON) / n
    raw = 0.0
    if ece > ece_threshold:
        raw = clamp(mean_succ - mean_conf, -max_adjustment, max_adjustment)
    return CalibrationSummary(buckets, n, total, mean_conf, mean_succ, ece, over, under, raw)


def _decimals(x: float) -> int:
    """The decimals ``x`` needs to be written exactly (at least 1, at most 6; edges come from a setting)."""
    return next((d for d in range(1, 7) if abs(round(x, d) - x) < 1e-9), 6)


def bucket_labels(buckets: list[dict], *, sep: str = "-") -> list[str]:
    """One label per bucket (stored ``low``/``high`` dicts), every edge with the decimals the edges need: quartile
    edges read 0.00-0.25 ... 0.75-1.00, the default ones 0.0-0.5 ... 0.9-1.0 (never rounded to a neighbour's edge)."""
    d = max((_decimals(float(e)) for b in buckets for e in (b["low"], b["high"])), default=1)
    return [f"{float(b['low']):.{d}f}{sep}{float(b['high']):.{d}f}" for b in buckets]


def clamp(x: float, low: float, high: float) -> float:
    return max(low, min(high, x))


def ema(previous: float | None, raw: float, *, alpha: float, cap: float) -> float:
    """Exponential moving average across runs, so the adjustment cannot swing run to run."""
    value = raw if previous is None else alpha * raw + (1 - alpha) * previous
    return round(clamp(value, -cap, cap), 6)
