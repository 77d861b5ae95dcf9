"""Within a phase each host runs its own operations without waiting for the others
(estate.provision.apply): a host whose operation fails stops there, is reported failed
with that operation, and no traceback reaches the user; the other host runs to the end."""
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.operations import server

from estate.provision.apply import HostResult, _collect, _ErrorLog, _host_failures_quiet


def test_a_failing_host_stops_alone_and_is_reported(capfd, tmp_path):
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    (host,) = state.inventory
    add_op(state, server.shell, name="first", commands=["false"])
    marker = tmp_path / "ran"
    add_op(state, server.shell, name="second", commands=[f"touch {marker}"])
    with _host_failures_quiet():
        run_ops(state, no_wait=True)
    results = {host.name: HostResult()}
    _collect(state, results, _ErrorLog())
    assert not marker.exists()                    # the host stopped at its failure
    assert [f.split(":")[0] for f in results[host.name].failed] == ["first"]
    assert results[host.name].status == "failed"
    assert "Traceback" not in capfd.readouterr().err


def test_the_quiet_setting_is_undone():
    import gevent
    before = gevent.get_hub().NOT_ERROR
    with _host_failures_quiet():
        assert len(gevent.get_hub().NOT_ERROR) == len(before) + 1
    assert gevent.get_hub().NOT_ERROR == before


def test_each_operations_time_is_recorded_with_its_phase_and_host():
    from estate.provision.apply import _timings
    state = State(Inventory((["@local"], {})), Config())
    timings: list = []
    state.add_callback_handler(_timings("base", timings))
    connect_all(state)
    add_op(state, server.shell, name="quick", commands=["true"])
    add_op(state, server.shell, name="slow", commands=["sleep 0.3"])
    run_ops(state, no_wait=True)
    by_name = {op: (secs, phase, host) for secs, phase, host, op in timings}
    assert set(by_name) == {"quick", "slow"}
    assert by_name["slow"][0] >= 0.3 > by_name["quick"][0]
    assert by_name["slow"][1:] == ("base", "@local")
