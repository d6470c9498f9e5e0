"""examples/sqlalchemy: a run triggered on a Session's connection commits or rolls back with it."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session
from tests.examples.conftest import example_on_path, run_in_example

from runlane import Runlane, RunStatus, postgres_lane
from runlane.testing import assert_triggered as assert_triggered_async
from runlane.testing.sync import all_triggered, assert_triggered


@pytest.fixture(scope="module")
def invoices(example_database: str) -> Iterator[ModuleType]:
    with example_on_path("sqlalchemy", DATABASE_URL=example_database):
        import invoices

        invoices.Base.metadata.create_all(invoices.engine)
        invoices.rl.sync.migrate()
        try:
            yield invoices
        finally:
            invoices.rl.sync.close()
            invoices.engine.dispose()


def test_a_committed_session_leaves_the_invoice_and_its_run(invoices: ModuleType) -> None:
    with Session(invoices.engine) as session, session.begin():
        invoice = invoices.create_invoice(session, "ACME", Decimal("99.00"))
        payload = {"invoice_id": invoice.id}
        # Not visible to anyone else (a worker, say) before the commit.
        assert_triggered(invoices.rl, invoices.render_pdf, payload=payload, count=0)

    (run,) = assert_triggered(invoices.rl, invoices.render_pdf, payload=payload)
    assert run.status is RunStatus.QUEUED


def test_a_rolled_back_session_leaves_neither(invoices: ModuleType) -> None:
    runs_before = len(all_triggered(invoices.rl, invoices.render_pdf))

    with Session(invoices.engine) as session:
        invoice = invoices.create_invoice(session, "Initech", Decimal("12.00"))
        invoice_id = invoice.id
        session.rollback()

    with Session(invoices.engine) as session:
        assert session.get(invoices.Invoice, invoice_id) is None
    assert_triggered(invoices.rl, invoices.render_pdf, payload={"invoice_id": invoice_id}, count=0)
    assert len(all_triggered(invoices.rl, invoices.render_pdf)) == runs_before


def test_the_script_and_the_documented_worker_command_render_the_invoice(
    invoices: ModuleType, example_database: str
) -> None:
    folder = Path(invoices.__file__).parent
    env = {"DATABASE_URL": example_database}

    stored = run_in_example(folder, "invoices.py", env=env)
    assert "run a worker to render it" in stored
    run_in_example(folder, "-m", "runlane", "worker", "invoices:rl", "--drain", env=env)

    with Session(invoices.engine) as session:
        rendered = session.scalars(
            select(invoices.Invoice).where(invoices.Invoice.customer == "ACME")
        ).all()
    assert rendered and all(i.pdf_path == f"invoices/{i.id}.pdf" for i in rendered)
    assert not all_triggered(invoices.rl, invoices.render_pdf, status=RunStatus.QUEUED)


async def test_an_async_session_hands_over_its_async_driver_connection(
    invoices: ModuleType, example_database: str
) -> None:
    # The README's snippet, on a runtime of its own: the example's runtime is used
    # through rl.sync, and one runtime object is used one way only.
    async_engine = create_async_engine(invoices.engine.url)
    invoice = invoices.Invoice(customer="Hooli", amount=Decimal("5.00"))
    async with Runlane(
        lane=postgres_lane(example_database), queues=[invoices.billing], tasks=[invoices.render_pdf]
    ) as rl:
        async with AsyncSession(async_engine) as session, session.begin():
            session.add(invoice)
            await session.flush()
            payload = {"invoice_id": invoice.id}
            raw = await (await session.connection()).get_raw_connection()
            await rl.trigger(invoices.render_pdf, payload, connection=raw.driver_connection)
            await assert_triggered_async(rl, invoices.render_pdf, payload=payload, count=0)

        await assert_triggered_async(rl, invoices.render_pdf, payload=payload, count=1)
    await async_engine.dispose()
