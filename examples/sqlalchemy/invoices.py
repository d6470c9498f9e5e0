"""Trigger from a SQLAlchemy Session: the run is written in the session's transaction.

python invoices.py                     # stores an invoice and its render run together
runlane worker invoices:rl --drain     # renders it
"""

import os
from decimal import Decimal
from typing import Any

from sqlalchemy import Numeric, String, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from runlane import Context, Run, Runlane, TaskDef, postgres_lane, queue, task

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://localhost/invoices")
# The same database through psycopg 3, as SQLAlchemy's "postgresql+psycopg" dialect.
engine = create_engine(make_url(DATABASE_URL).set(drivername="postgresql+psycopg"))


class Base(DeclarativeBase):
    pass


class Invoice(Base):
    __tablename__ = "invoices"

    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(String(200))
    amount: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    pdf_path: Mapped[str | None]


billing = queue("billing", default=True)


@task("invoices.render_pdf")
def render_pdf(payload: dict[str, Any], ctx: Context) -> dict[str, str]:
    with Session(engine) as session, session.begin():
        invoice = session.get_one(Invoice, payload["invoice_id"])
        invoice.pdf_path = f"invoices/{invoice.id}.pdf"  # a real app renders and uploads here
        return {"pdf": invoice.pdf_path}


rl = Runlane(lane=postgres_lane(DATABASE_URL), queues=[billing], tasks=[render_pdf])


def trigger_in(session: Session, task: TaskDef[Any], payload: Any, **options: Any) -> Run:
    """Trigger inside ``session``'s transaction: the run exists iff the session commits."""
    psycopg_connection = session.connection().connection.driver_connection
    run: Run = rl.sync.trigger(task, payload, connection=psycopg_connection, **options)
    return run


def create_invoice(session: Session, customer: str, amount: Decimal) -> Invoice:
    invoice = Invoice(customer=customer, amount=amount)
    session.add(invoice)
    session.flush()  # gives the invoice its id, still inside the transaction
    trigger_in(session, render_pdf, {"invoice_id": invoice.id})
    return invoice


if __name__ == "__main__":
    Base.metadata.create_all(engine)
    try:
        rl.sync.migrate()
        with Session(engine) as session, session.begin():
            invoice_id = create_invoice(session, "ACME", Decimal("99.00")).id
        print(f"invoice {invoice_id} and its render run are stored; run a worker to render it.")
    finally:
        rl.sync.close()
