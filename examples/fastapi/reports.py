"""A FastAPI endpoint that triggers a report and waits for it: the PDF when it is done,
or ``202`` with the run id when it is still running after the timeout.

uvicorn reports:app                          # API and an in-process worker
REPORTS_WORKER=0 uvicorn reports:app         # API only ...
runlane worker reports:rl                    # ... and workers of their own

``rl.runs.wait`` hears the outcome from any process that finishes the run (the SQLite
file wakeup here; LISTEN/NOTIFY on PostgreSQL), so the worker may run anywhere.
"""

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from runlane import Context, ErrorCode, Runlane, RunlaneError, RunStatus, queue, sqlite_lane, task

reports = queue("reports", default=True)

#: How long a request waits for its report before answering 202.
WAIT_FOR_REPORT = os.environ.get("REPORTS_WAIT", "30s")


class ReportRequest(BaseModel):
    account_id: str
    pages: int = 3
    #: Seconds each page takes to render (a stand-in for real work).
    seconds_per_page: float = 0.0


@task("reports.render", schema=ReportRequest)
async def render_report(request: ReportRequest, ctx: Context) -> dict[str, Any]:
    for page in range(1, request.pages + 1):
        await asyncio.sleep(request.seconds_per_page)
        # Shown by `runlane runs show`, the dashboard, and GET /reports/{id} below.
        await ctx.progress(page / request.pages, message=f"page {page} of {request.pages}")
    return {"account_id": request.account_id, "pdf": f"/files/{ctx.run_id}.pdf"}


rl = Runlane(
    lane=sqlite_lane(os.environ.get("RUNLANE_DB", "reports.db")),
    queues=[reports],
    tasks=[render_report],
)


def create_app(*, in_process_worker: bool) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with rl:
            if not in_process_worker:
                yield
                return
            worker = rl.worker(concurrency=10, handle_signals=False)
            running = asyncio.create_task(worker.run())
            try:
                yield
            finally:
                await worker.stop()
                await running

    app = FastAPI(lifespan=lifespan)

    @app.exception_handler(RunlaneError)
    async def runlane_error(request: Request, error: RunlaneError) -> JSONResponse:
        status = 404 if error.code is ErrorCode.RUN_NOT_FOUND else 400
        return JSONResponse({"code": error.code.value, "message": error.message}, status)

    @app.post("/reports")
    async def create_report(report: ReportRequest) -> JSONResponse:
        run = await rl.trigger(render_report, report)
        try:
            run = await rl.runs.wait(run.id, timeout=WAIT_FOR_REPORT)
        except TimeoutError:
            # Still running: the client polls GET /reports/{run_id} (or waits again).
            return JSONResponse({"run_id": run.id, "status": "running"}, 202)
        if run.status is not RunStatus.SUCCEEDED:
            return JSONResponse({"run_id": run.id, "status": run.status.value}, 500)
        return JSONResponse({"run_id": run.id, "status": "succeeded", "report": run.result})

    @app.get("/reports/{run_id}")
    async def show_report(run_id: str) -> dict[str, Any]:
        run = await rl.runs.get(run_id)
        progress = run.progress
        return {
            "status": run.status.value,
            "report": run.result,
            "progress": None
            if progress is None
            else {"fraction": progress.fraction, "message": progress.message},
        }

    return app


app = create_app(in_process_worker=os.environ.get("REPORTS_WORKER", "1") == "1")
