"""Which requests another site's page could have made: refused before authentication."""

from __future__ import annotations

import pytest

from metalforge.api.auth.cross_site import refusal


def _scope(method: str, *headers: tuple[str, str]) -> dict[str, object]:
    return {
        "type": "http",
        "method": method,
        "scheme": "http",
        "headers": [(k.encode(), v.encode()) for k, v in (("host", "mf.example:6385"), *headers)],
    }


@pytest.mark.parametrize(
    "headers",
    [
        (("content-type", "application/x-www-form-urlencoded"),),
        (("content-type", "multipart/form-data; boundary=x"),),
        (("content-type", "text/plain"),),
        (),
        (("accept", "application/json"),),
    ],
    ids=["form", "multipart", "text", "bare", "accept-only"],
)
def test_a_post_a_form_could_send_is_refused(headers: tuple[tuple[str, str], ...]) -> None:
    found = refusal(_scope("POST", *headers))
    assert found is not None
    assert found[0] == 415
    assert "could come from another site's page" in found[1]


@pytest.mark.parametrize(
    "headers",
    [
        (("content-type", "application/json"),),
        (("content-type", "application/json-patch+json"),),
        (("content-type", "Application/JSON; charset=utf-8"),),
        (("x-openstack-ironic-api-version", "1.99"),),
        (("x-openstack-ironic-inspector-api-version", "1.18"),),
        (("openstack-api-version", "baremetal 1.99"),),
        (("x-auth-token", "t"),),
        (("origin", "http://mf.example:6385"), ("content-type", "application/json")),
    ],
    ids=["json", "patch", "json-cased", "ironic", "inspector", "openstack", "token", "same-origin"],
)
def test_what_clients_send_passes(headers: tuple[tuple[str, str], ...]) -> None:
    assert refusal(_scope("POST", *headers)) is None


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://mf.example:6386"])
def test_a_foreign_origin_is_refused_whatever_the_request_carries(method: str, origin: str) -> None:
    scope = _scope(
        method,
        ("origin", origin),
        ("content-type", "application/json"),
        ("x-openstack-ironic-api-version", "1.99"),
    )
    assert refusal(scope) == (
        403,
        f"Cross-site request refused: origin {origin!r} is not this service.",
    )


def test_reads_and_other_methods_need_no_proof() -> None:
    assert refusal(_scope("GET", ("origin", "https://evil.example"))) is None
    for method in ("PUT", "PATCH", "DELETE"):
        assert refusal(_scope(method)) is None, "a page cannot send these without leave"


def test_the_public_endpoint_is_this_service_too() -> None:
    scope = _scope("POST", ("origin", "https://baremetal.example"), ("x-auth-token", "t"))
    assert refusal(scope) is not None
    assert refusal(scope, "https://baremetal.example:443/") is None
