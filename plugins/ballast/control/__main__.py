"""`python -m ballast.control {open,fail} ...`: list a job's open plans, fail one whose run is gone.

The message of a run that found its operator held names these commands; taking a plan over
instead is a ballast_migrate run with `take_over` (that run then emits and verifies it).

The metrics DB is BALLAST_DB_URL (or --db-url), the same one the tasks use.
"""

from __future__ import annotations

import argparse
import sys

from ballast import store


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ballast.control", description=__doc__.split("\n\n")[0])
    ap.add_argument("--db-url", default=None, help="metrics DB URL (default: BALLAST_DB_URL, else .state/metrics.db)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    op = sub.add_parser("open", help="list the open plans of a job")
    op.add_argument("job")
    op.add_argument("--operator", default=None)
    fl = sub.add_parser("fail", help="mark an open plan failed (releases its operator; nothing more is sent)")
    fl.add_argument("plan_id")
    fl.add_argument("--reason", default="failed by hand: its run is gone")
    args = ap.parse_args(argv)

    from ballast.store.schema import default_url

    url = args.db_url or default_url()
    if args.cmd == "open":
        plans = [p for p in store.recent_plans(url, limit=1000, job=args.job)
                 if p.is_open and args.operator in (None, p.operator)]
        for p in plans:
            print(f"{p.plan_id}\t{p.operator}\t{p.status}\towner={p.owner or '?'}\t"
                  f"{'alive' if p.owner_alive() else 'gone'}")
        return 0
    plan = store.get_plan(url, args.plan_id)
    if plan is None or not plan.is_open:
        print(f"plan {args.plan_id} is {'not in the metrics DB' if plan is None else plan.status}: nothing to do",
              file=sys.stderr)
        return 2
    from ballast.control.verify import fail_plan

    print(fail_plan(url, args.plan_id, f"plan {args.plan_id}: {args.reason}", "plan_failed_by_hand"))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
