"""Command-line views of the learning loop: feedback, mistakes, calibrate, autonomy, full-cycle."""

from django.core.management.base import BaseCommand, CommandError

from actions.selectors import action_get
from agents.selectors import agent_get
from autonomy.calibration import bucket_labels
from autonomy.selectors import latest_calibration, waiting_transition
from autonomy.services import autonomy_cycle_run, autonomy_evaluate
from autonomy.services.calibration import MAX_WINDOW_DAYS, calibration_preview
from common.api import ApplicationError
from common.text import terminal_safe
from feedback.selectors import agent_patterns, feedback_record_summary
from feedback.services.mistakes import mistake_patterns_detect

MAX_LIMIT = 10000


def render_table(headers: list[str], rows: list[list]) -> str:
    def cell(v):
        if v is None:
            return "—"
        if isinstance(v, float):
            return f"{v:.3f}"
        return terminal_safe(str(v))

    cells = [[str(h) for h in headers]] + [[cell(c) for c in r] for r in rows]
    widths = [min(70, max(len(r[i]) for r in cells)) for i in range(len(headers))]
    line = lambda r: "  ".join(c[:70].ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()  # noqa: E731
    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]])


class Command(BaseCommand):
    help = "Readable tables of an agent's feedback, mistakes, calibration, an action's autonomy, or a full autonomy cycle."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="view", required=True)

        def view(name, about, target, target_help):
            p = sub.add_parser(name, help=about)
            p.add_argument(target, help=target_help)
            p.add_argument(
                "--tenant",
                help=f"The {target}'s tenant (slug); needed when several tenants use its name",
            )
            return p

        p = view("feedback", "Feedback records of an agent", "agent", "Agent id or name")
        p.add_argument("--limit", type=int, default=20, help=f"Latest records to list (at most {MAX_LIMIT})")
        p = view("mistakes", "Detect and list an agent's repeated-mistake patterns", "agent", "Agent id or name")
        p.add_argument("--window-days", type=int, default=None)
        p.add_argument("--no-detect", action="store_true", help="Only list, do not run detection first")
        p = view("calibrate", "Calibrate an agent and show its buckets", "agent", "Agent id or name")
        p.add_argument("--window-days", type=int, default=None)
        p = view("autonomy", "Evaluate one action's autonomy level", "action", "Action name, e.g. email.send")
        p.add_argument("--window-days", type=int, default=None)
        view("full-cycle", "Run a full autonomy cycle for an agent and show its episode", "agent", "Agent id or name")

    def handle(self, *args, view, **options):
        for option, value, most in (
            ("--limit", options.get("limit"), MAX_LIMIT),
            ("--window-days", options.get("window_days"), MAX_WINDOW_DAYS),
        ):
            if value is not None and value < 1:
                raise CommandError(f"{option} must be at least 1.")
            if value is not None and value > most:
                raise CommandError(f"{option} must be at most {most}.")
        try:
            getattr(self, "view_" + view.replace("-", "_"))(**options)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc

    def out(self, text=""):
        self.stdout.write(text)

    def view_feedback(self, agent, limit, tenant, **_):
        a = agent_get(ref=agent, tenant=tenant)
        count, summary, latest = feedback_record_summary(agent=a, limit=limit)
        self.out(f"Feedback for agent {a.name} (#{a.pk}): {count} record(s)\n")
        self.out(render_table(["action", "type", "records"], [[r["action__name"], r["feedback_type"], r["n"]] for r in summary]))
        self.out(f"\nLatest {limit}:")
        rows = [
            [
                r.pk,
                r.created_at.strftime("%Y-%m-%d %H:%M"),
                r.action.name,
                r.feedback_type,
                r.agent_confidence,
                r.mistake_category or "",
                r.human_explanation[:50],
            ]
            for r in latest
        ]
        self.out(render_table(["id", "when", "action", "type", "conf", "category", "explanation"], rows))

    def view_mistakes(self, agent, window_days, no_detect, tenant, **_):

        a = agent_get(ref=agent, tenant=tenant)
        if not no_detect:
            r = mistake_patterns_detect(agent_id=a.pk, window_days=window_days)
            self.out(f"Detection: {len(r.created)} new, {len(r.updated)} updated pattern(s).\n")
        rows = [
            [p.pk, p.action.name, p.category, p.occurrence_count, p.status, p.last_seen.strftime("%Y-%m-%d"), p.description]
            for p in agent_patterns(agent=a)
        ]
        self.out(f"Mistake patterns of {a.name}:")
        self.out(render_table(["id", "action", "category", "count", "status", "last seen", "description"], rows))

    def view_calibrate(self, agent, window_days, tenant, **_):
        """Read-only: what a calibration over the window measures now; nothing is stored, so looking (over any
        window) never changes the adjustment consult applies or what the next cycle smooths against."""

        a = agent_get(ref=agent, tenant=tenant)
        records = calibration_preview(agent_id=a.pk, window_days=window_days)
        overall = records[0]
        self.out(f"Calibration of {a.name} over {overall.window_days} days ({overall.total_samples} samples):\n")
        rows = [
            [
                label,
                b["count"],
                b["mean_confidence"],
                b["success_rate"],
                b["gap"],
                "yes" if b["counted"] else "no (too few)",
            ]
            for b, label in zip(overall.buckets, bucket_labels(overall.buckets), strict=True)
        ]
        self.out(render_table(["bucket", "n", "mean conf", "success", "gap", "counts"], rows))
        self.out(
            f"\nECE {overall.ece if overall.ece is None else round(overall.ece, 4)}; mean confidence "
            f"{overall.mean_confidence if overall.mean_confidence is None else round(overall.mean_confidence, 3)}; mean success "
            f"{overall.mean_success if overall.mean_success is None else round(overall.mean_success, 3)}; overconfident "
            f"{overall.overconfidence_rate:.0%}, underconfident {overall.underconfidence_rate:.0%}; "
            f"recommended adjustment {overall.recommended_adjustment:+.3f} (raw {overall.raw_adjustment:+.3f})"
        )
        live = latest_calibration(agent_id=a.pk, action_id=None)
        if live is None or not (live.sample_count > 0 and live.ece is not None):
            self.out("Consult applies no adjustment overall (no measured calibration stored); this report stores none.")
        else:
            self.out(
                f"Consult applies {live.recommended_adjustment:+.3f} overall (the autonomy cycle's calibration over "
                f"{live.window_days} days, {live.computed_at:%Y-%m-%d %H:%M}); this report stores none."
            )
        if len(records) > 1:
            self.out("\nPer action:")
            self.out(
                render_table(
                    ["action", "samples", "ECE", "adjustment"],
                    [[r.action.name, r.sample_count, r.ece, r.recommended_adjustment] for r in records[1:]],
                )
            )

    def view_autonomy(self, action, window_days, tenant, **_):

        act = action_get(name=action, tenant=tenant)
        result = autonomy_evaluate(action_ids=[act.pk], window_days=window_days, force=True)
        self.out(f"Autonomy of {act.name} (level {act.autonomy_level}):\n")
        self.out(
            render_table(
                ["samples", "success", "rejection", "level", "suggested"],
                [
                    [r["samples"], r["success_rate"], r["rejection_rate"], r["level"], r["target_level"] or "keep"]
                    for r in result["evaluated"]
                ],
            )
        )
        for t in result["proposed"]:
            self.out(f"\nProposed transition #{t.pk}: {t.reason}. A reviewer must approve it in the admin.")
        open_t = waiting_transition(action_id=act.pk)
        if open_t and not result["proposed"]:
            self.out(f"\nTransition #{open_t.pk} ({open_t.from_level}→{open_t.to_level}) is already awaiting a decision.")

    def view_full_cycle(self, agent, tenant, **_):

        a = agent_get(ref=agent, tenant=tenant)
        episode = autonomy_cycle_run(agent_id=a.pk, trigger="command")
        if episode is None:
            raise CommandError(f"A autonomy cycle for {a.name} is already running elsewhere.")
        self.out(f"Episode #{episode.pk} for {a.name}: {episode.status}\n")
        rows = [[e.seq, e.kind, e.message] for e in episode.events.order_by("seq")]
        self.out(render_table(["#", "event", "detail"], rows))
        self.out(f"\nSummary: {episode.summary_text}")
