"""Links from Airflow's pages to the console: a task that drives a plan shows "Ballast plan".

Airflow 3 computes an operator's extra links when its task ends (from the rendered task, stored
as XCom) and shows them on the task instance's page; the plugin registers the class so the UI
knows its name.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

from ballast.hooks import console_plan_url


class ConsolePlanLink(BaseOperatorLink):
    """The console page of the task's plan (its job selected, the plan pinned); none without a plan."""

    name = "Ballast plan"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        plan_id = str(getattr(operator, "plan_id", "") or "")
        return console_plan_url(plan_id) if plan_id and plan_id != "None" else ""
