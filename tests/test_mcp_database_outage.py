"""MCP during a database outage: the key cannot be checked, and every method says so as REST does (503, retry),
never as an empty list of tools or resources a host would keep for its session, never as an internal error."""

import anyio
import pytest
from django.db import OperationalError
from mcp import MCPError
from mcp_types import CallToolRequestParams

import mcp_server.server as srv

pytestmark = pytest.mark.django_db(transaction=True)


class _Ctx:
    request = None


def _handler(server, method):
    return server.get_request_handler(method).handler


@pytest.fixture
def database_down(monkeypatch):
    """The key check fails as it does when PostgreSQL is unreachable: REST answers 503 with Retry-After."""

    def down(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(srv, "authenticate", down)
    return srv.build_server(lambda ctx: ("Bearer alg_00000000_whatever", "test"), threads=1)


@pytest.mark.parametrize("method", ["tools/list", "resources/list", "resources/templates/list"])
def test_a_list_during_an_outage_is_an_error_with_the_503_not_an_empty_list(database_down, method):
    with pytest.raises(MCPError) as caught:
        anyio.run(_handler(database_down, method), _Ctx(), None)
    assert caught.value.error.data["http_status"] == 503


def test_a_call_of_any_tool_during_an_outage_is_a_tool_error_with_the_503(database_down):
    handler = _handler(database_down, "tools/call")
    for name in ("resolve", "no_such_tool"):  # the name is checked after the key, which could not be
        result = anyio.run(handler, _Ctx(), CallToolRequestParams(name=name, arguments={}))
        assert result.is_error and result.structured_content["http_status"] == 503, name
