"""A FastAPI app whose lifespan opens the Runlane runtime and, optionally, runs a worker.

uvicorn signups:app                          # API and an in-process worker
SIGNUPS_WORKER=0 uvicorn signups:app         # API only ...
runlane worker signups:rl                    # ... and workers of their own
"""

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from runlane import Context, ErrorCode, Runlane, RunlaneError, queue, sqlite_lane, task

emails = queue("emails", default=True)


class Signup(BaseModel):
    email: str


@task("signups.send_welcome", schema=Signup)
async def send_welcome(payload: Signup, ctx: Context) -> dict[str, Any]:
    return {"sent_to": payload.email}


rl = Runlane(
    lane=sqlite_lane(os.environ.get("RUNLANE_DB", "signups.db")),
    queues=[emails],
    tasks=[send_welcome],
)


def create_app(*, in_process_worker: bool) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with rl:  # opens the lane at startup, closes it at shutdown
            if not in_process_worker:
                yield
                return
            # The server owns SIGINT/SIGTERM; the lifespan stops the worker on shutdown,
            # and in-flight runs finish first.
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

    @app.post("/signups", status_code=202)
    async def sign_up(signup: Signup) -> dict[str, str]:
        run = await rl.trigger(send_welcome, signup)
        return {"run_id": run.id}

    @app.get("/runs/{run_id}")
    async def show_run(run_id: str) -> dict[str, Any]:
        run = await rl.runs.get(run_id)
        return {"status": run.status.value, "result": run.result}

    return app


app = create_app(in_process_worker=os.environ.get("SIGNUPS_WORKER", "1") == "1")
