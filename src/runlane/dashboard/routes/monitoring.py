"""``GET /healthz`` (storage answers) and ``GET /metrics`` (storage gauges for Prometheus)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runlane import RunlaneError
from runlane.dashboard.settings import dashboard_of
from runlane.metrics.storage import StorageGaugeCollector, read_storage_snapshot


async def healthz(request: Request) -> Response:
    """``{"ok": true}`` when storage answers a read, else 503."""
    try:
        await dashboard_of(request).rl.queue_stats()
    except (RunlaneError, OSError) as error:
        message = error.message if isinstance(error, RunlaneError) else type(error).__name__
        return JSONResponse({"ok": False, "error": message}, status_code=503)
    return JSONResponse({"ok": True})


async def metrics(request: Request) -> Response:
    """The storage gauges in Prometheus text format, read from storage at scrape time."""
    snapshot = await read_storage_snapshot(dashboard_of(request).rl)
    # A registry per scrape holds just this snapshot: nothing is shared between
    # scrapes or with the process-wide default registry.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StorageGaugeCollector(snapshot))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


ROUTES = [
    Route("/healthz", healthz, name="healthz"),
    Route("/metrics", metrics, name="metrics"),
]
