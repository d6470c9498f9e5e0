"""The old import paths of modules that moved to their layer still work, for one release."""

from __future__ import annotations

import gc
import importlib
import sys
import warnings

import pytest

MOVED = {
    "runlane.core.errors": "runlane.types.errors",
    "runlane.core.clock": "runlane.types.clock",
    "runlane.core.durations": "runlane.types.durations",
    "runlane.core.ids": "runlane.types.ids",
    "runlane.core.storable_text": "runlane.types.storable_text",
    "runlane.core.carriers": "runlane.types.carriers",
    "runlane.core.retry": "runlane.types.retry",
    "runlane.core.queue_defs": "runlane.model.queue_defs",
    "runlane.core.definitions": "runlane.model.definitions",
    "runlane.core.schedule_defs": "runlane.model.schedule_defs",
    "runlane.core.cron": "runlane.model.cron",
    "runlane.core.payloads": "runlane.model.payloads",
    "runlane.core.transitions": "runlane.model.transitions",
    "runlane.core.capacity": "runlane.model.capacity",
    "runlane.core.context": "runlane.model.context",
    "runlane.core.lane_spec": "runlane.ports.lane",
    "runlane.storage.protocol": "runlane.ports.storage",
    "runlane.transport.protocol": "runlane.ports.transport",
    "runlane.transport.topic_protocol": "runlane.ports.topic_transport",
    "runlane.transport.envelope": "runlane.ports.wakeup_envelope",
    "runlane.transport.message_envelope": "runlane.ports.message_envelope",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_warns_once_and_hands_out_the_new_modules_objects(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    moved_to = importlib.import_module(new)
    public = [name for name in vars(moved_to) if not name.startswith("_")]
    gc.collect()  # an earlier test's garbage warns (ResourceWarning) when collected, not here
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stub = importlib.import_module(old)
    # Only what the import itself said: a collection during it may add a ResourceWarning.
    said = [w for w in caught if not issubclass(w.category, ResourceWarning)]
    assert [str(w.message).split(";")[0] for w in said] == [f"{old} moved to {new}"]
    assert said[0].category is DeprecationWarning
    assert public
    for name in public:
        assert getattr(stub, name) is getattr(moved_to, name)
    with pytest.raises(AttributeError):
        _ = stub.no_such_name


#: The public names of the attempt runner's old module, and where each went.
def test_the_storage_protocol_a_third_party_driver_imports_is_the_port() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from runlane.storage.protocol import Storage, StorageCapabilities

    from runlane.ports.storage import Storage as PortStorage
    from runlane.ports.storage import StorageCapabilities as PortCapabilities

    assert Storage is PortStorage
    assert StorageCapabilities is PortCapabilities
