"""A Flask app that triggers through ``rl.sync``, the blocking facade for sync code.

flask --app feedback run               # the web app
runlane worker feedback:rl             # a worker, in another terminal
"""

import atexit
import os
from typing import Any

from flask import Flask, request

from runlane import Context, ErrorCode, Runlane, RunlaneError, queue, sqlite_lane, task

mail = queue("mail", default=True)


@task("feedback.thank_customer")
def thank_customer(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    # A real app sends the mail here, keyed on ctx.run_id so a retry never sends twice.
    return {"thanked": payload["email"]}


rl = Runlane(
    lane=sqlite_lane(os.environ.get("RUNLANE_DB", "feedback.db")),
    queues=[mail],
    tasks=[thank_customer],
)
atexit.register(rl.sync.close)  # closes the runtime and its background loop on exit

app = Flask(__name__)


@app.post("/feedback")
def leave_feedback() -> tuple[dict[str, str], int]:
    email = request.form["email"]
    # Thank them an hour later, once per address however often they write.
    run = rl.sync.trigger(
        thank_customer, {"email": email}, delay="1h", idempotency_key=f"thanks-{email}"
    )
    return {"run_id": run.id}, 202


@app.get("/runs/<run_id>")
def show_run(run_id: str) -> dict[str, Any]:
    run = rl.sync.runs.get(run_id)
    return {"status": run.status.value, "result": run.result}


@app.errorhandler(RunlaneError)
def runlane_error(error: RunlaneError) -> tuple[dict[str, str], int]:
    status = 404 if error.code is ErrorCode.RUN_NOT_FOUND else 400
    return {"code": error.code.value, "message": error.message}, status
