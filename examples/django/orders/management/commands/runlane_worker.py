import asyncio

from django.core.management.base import BaseCommand, CommandParser

from orders.jobs import rl
from runlane import WorkerMode


class Command(BaseCommand):
    help = "Run a Runlane worker for the shop's tasks (Ctrl-C or SIGTERM stops it gracefully)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=10)
        parser.add_argument("--drain", action="store_true", help="exit once no run is due")

    def handle(self, *args: object, concurrency: int, drain: bool, **options: object) -> None:
        mode = WorkerMode.DRAIN if drain else WorkerMode.POLL

        async def work() -> None:
            async with rl:
                await rl.worker(concurrency=concurrency, mode=mode).run()

        asyncio.run(work())
